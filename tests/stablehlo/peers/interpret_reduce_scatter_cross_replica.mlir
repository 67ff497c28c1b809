// Transcribed from openxla/stablehlo stablehlo/tests/interpret/reduce_scatter.mlir, module @cross_replica: its @reduce_scatter function in a module of 2 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @cross_replica attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @reduce_scatter(%operand : tensor<2x4xi64>) -> tensor<2x2xi64> {
    %result = "stablehlo.reduce_scatter"(%operand) ({
      ^bb0(%arg0: tensor<i64>, %arg1: tensor<i64>):
        %0 = stablehlo.add %arg0, %arg1 : tensor<i64>
        stablehlo.return %0 : tensor<i64>
    }) {
      scatter_dimension = 1 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>
    } : (tensor<2x4xi64>) -> tensor<2x2xi64>
    return %result : tensor<2x2xi64>
  }
}
