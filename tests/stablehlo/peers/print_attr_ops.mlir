// Transcribed from openxla/stablehlo stablehlo/tests/print_stablehlo.mlir, funcs @multiple_attr_ops and @single_attr_enums, their CHECK lines.
func.func @multiple_attr_ops(%arg0 : tensor<3x4xf32>, %arg1: tensor<1x2xf32>, %arg2: tensor<f32>, %arg3: tensor<3xi64>) -> () {
  %0 = stablehlo.reduce_precision %arg0, format = e8m10 : tensor<3x4xf32>
  %1 = stablehlo.custom_call @foo(%arg0, %arg0) {backend_config = "bar", has_side_effect = true} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<1x2x3xf32>
  %2 = stablehlo.custom_call @"foo-not-id"(%arg0, %arg0) {backend_config = "bar", has_side_effect = true} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<1x2x3xf32>
  %3 = stablehlo.dot %arg3, %arg3, precision = [DEFAULT, DEFAULT] : (tensor<3xi64>, tensor<3xi64>) -> tensor<i64>
  %4 = stablehlo.dot %arg3, %arg3, precision = [] : (tensor<3xi64>, tensor<3xi64>) -> tensor<i64>
  %output_state, %output = stablehlo.rng_bit_generator %arg1, algorithm = PHILOX : (tensor<1x2xf32>) -> (tensor<1x2xf32>, tensor<2x2xui32>)
  %5 = stablehlo.rng %arg2, %arg2, %arg3, distribution = NORMAL : (tensor<f32>, tensor<f32>, tensor<3xi64>) -> tensor<2x3x5xf32>
  "stablehlo.return"() : () -> ()
}
