// Transcribed from openxla/stablehlo stablehlo/tests/interpret/collective_reduce.mlir, module @cross_replica: its @collective_reduce function in a module of 2 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @cross_replica attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @collective_reduce(%operand : tensor<4xi64>) -> tensor<4xi64> {
    %result = "stablehlo.collective_reduce"(%operand) ({
      ^bb0(%arg0: tensor<i64>, %arg1: tensor<i64>):
        %0 = stablehlo.add %arg0, %arg1 : tensor<i64>
        stablehlo.return %0 : tensor<i64>
    }) {
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>
    } : (tensor<4xi64>) -> tensor<4xi64>
    return %result : tensor<4xi64>
  }
}
