// Transcribed from openxla/stablehlo stablehlo/tests/interpret/all_to_all.mlir, module @same_split_concat_dim: its @all_to_all function in a module of 2 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @same_split_concat_dim attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @all_to_all(%operand : tensor<2x4xi64>) -> tensor<2x4xi64> {
    %result = "stablehlo.all_to_all"(%operand) {
      split_dimension = 0 : i64,
      concat_dimension = 0 : i64,
      split_count = 2 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>
    } : (tensor<2x4xi64>) -> tensor<2x4xi64>
    return %result : tensor<2x4xi64>
  }
}
