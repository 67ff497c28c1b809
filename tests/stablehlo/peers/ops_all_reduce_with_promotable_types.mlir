// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_reduce_with_promotable_types (a valid module of the verifier's tests).
// CHECK-LABEL: func @all_reduce_with_promotable_types
func.func @all_reduce_with_promotable_types(%operand: tensor<f32>) -> tensor<f64> {

  %result = "stablehlo.all_reduce"(%operand) ({
    ^bb0(%arg0: tensor<f64>, %arg1: tensor<f64>):
      %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      "stablehlo.return"(%0) : (tensor<f64>) -> ()
  }) {
    replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
    channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>
  } : (tensor<f32>) -> tensor<f64>

  func.return %result : tensor<f64>
}
