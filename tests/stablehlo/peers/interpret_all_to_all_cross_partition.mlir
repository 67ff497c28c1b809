// Transcribed from openxla/stablehlo stablehlo/tests/interpret/all_to_all.mlir, module @cross_partition: its @all_to_all function in a module of 1 replica x 2 partitions, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @cross_partition attributes {mhlo.num_replicas = 1 : i32, mhlo.num_partitions = 2 : i32} {
  func.func @all_to_all(%operand : tensor<2x4xi64>) -> tensor<4x2xi64> {
    %result = "stablehlo.all_to_all"(%operand) {
      split_dimension = 1 : i64,
      concat_dimension = 0 : i64,
      split_count = 2 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>
    } : (tensor<2x4xi64>) -> tensor<4x2xi64>
    return %result : tensor<4x2xi64>
  }
}
