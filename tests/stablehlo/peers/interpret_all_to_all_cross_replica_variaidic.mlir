// Transcribed from openxla/stablehlo stablehlo/tests/interpret/all_to_all.mlir, module @cross_replica_variaidic: its @all_to_all function in a module of 2 replicas x 1 partition, the grid of its @main's run_parallel (the harness @main left out; its inputs and expected results are in interpret.json).
module @cross_replica_variaidic attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @all_to_all(%operand0 : tensor<2x4xi64>, %operand1 : tensor<3x4xi32>) -> (tensor<4x2xi64>,  tensor<6x2xi32>) {
    %result:2 = "stablehlo.all_to_all"(%operand0, %operand1) {
      split_dimension = 1 : i64,
      concat_dimension = 0 : i64,
      split_count = 2 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>
    } : (tensor<2x4xi64>, tensor<3x4xi32>) -> (tensor<4x2xi64>, tensor<6x2xi32>)
    return %result#0, %result#1 : tensor<4x2xi64>, tensor<6x2xi32>
  }
}
