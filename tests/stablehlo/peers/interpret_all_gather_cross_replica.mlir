// Transcribed from openxla/stablehlo stablehlo/tests/interpret/all_gather.mlir, module @cross_replica: its @all_gather function in a module of 2 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @cross_replica attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @all_gather(%arg0 : tensor<2x2xi64>) -> tensor<2x4xi64> {
    %result = "stablehlo.all_gather"(%arg0) {
      all_gather_dim = 1 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>
    } : (tensor<2x2xi64>) -> tensor<2x4xi64>
    return %result : tensor<2x4xi64>
  }
}
