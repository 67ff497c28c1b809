// Transcribed from openxla/stablehlo stablehlo/tests/interpret/collective_permute.mlir, module @cross_replica_with_self_loops: its @collective_permute function in a module of 5 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @cross_replica_with_self_loops attributes {mhlo.num_replicas = 5 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @collective_permute(%operand : tensor<2x2xi64>) -> tensor<2x2xi64> {
    %result = "stablehlo.collective_permute"(%operand) {
      source_target_pairs = dense<[[0, 1], [1, 2], [3, 3], [4, 4]]> : tensor<4x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>
    } : (tensor<2x2xi64>) -> tensor<2x2xi64>
    return %result : tensor<2x2xi64>
  }
}
