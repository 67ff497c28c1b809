// Transcribed from openxla/stablehlo stablehlo/tests/interpret/all_reduce.mlir, module @cross_replica_variadic: its @all_reduce function (the interpreter harness @main left out).
module @cross_replica_variadic {
  func.func @all_reduce(%operand0 : tensor<4xi64>, %operand1 : tensor<5xi64>) -> (tensor<4xi64>, tensor<5xi64>) {
    %result:2 = "stablehlo.all_reduce"(%operand0, %operand1) ({
      ^bb0(%arg0: tensor<i64>, %arg1: tensor<i64>):
        %0 = stablehlo.add %arg0, %arg1 : tensor<i64>
        stablehlo.return %0 : tensor<i64>
    }) {
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>
    } : (tensor<4xi64>, tensor<5xi64>) -> (tensor<4xi64>, tensor<5xi64>)
    return %result#0, %result#1 : tensor<4xi64>, tensor<5xi64>
  }
}
