// Transcribed from openxla/stablehlo stablehlo/tests/interpret/collective_broadcast.mlir, module @has_dynamic_root_variadic: its @collective_broadcast function in a module of 2 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @has_dynamic_root_variadic attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @collective_broadcast(%data0: tensor<1x2xi64>,
                                  %data1: tensor<1x2xi64>,
                                  %root: tensor<2xi32>)
      -> (tensor<1x2xi64>, tensor<1x2xi64>) {
    %result:2 = "stablehlo.collective_broadcast"(%data0, %data1, %root) {
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
      has_dynamic_root
    } : (tensor<1x2xi64>, tensor<1x2xi64>, tensor<2xi32>)
        -> (tensor<1x2xi64>, tensor<1x2xi64>)
    func.return %result#0, %result#1 : tensor<1x2xi64>, tensor<1x2xi64>
  }
}
