// Transcribed from openxla/stablehlo stablehlo/tests/interpret/collective_broadcast.mlir, module @cross_replica_multiple_partitions: its @collective_broadcast function in a module of 2 replicas x 2 partitions, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @cross_replica_multiple_partitions attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 2 : i32} {
  func.func @collective_broadcast(%operand : tensor<1x2xi64>) -> tensor<1x2xi64> {
    %result = "stablehlo.collective_broadcast"(%operand) {
      replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>
    } : (tensor<1x2xi64>) -> tensor<1x2xi64>
    return %result : tensor<1x2xi64>
  }
}
