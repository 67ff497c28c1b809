// Transcribed from openxla/stablehlo stablehlo/tests/interpret/collective_broadcast.mlir, module @has_dynamic_root: its @collective_broadcast function in a module of 2 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @has_dynamic_root attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @collective_broadcast(%operand: tensor<1x2xi64>,
                                  %root: tensor<1xi32>) -> tensor<1x2xi64> {
    %result = "stablehlo.collective_broadcast"(%operand, %root) {
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
      has_dynamic_root
    } : (tensor<1x2xi64>, tensor<1xi32>) -> tensor<1x2xi64>
    func.return %result : tensor<1x2xi64>
  }
}
