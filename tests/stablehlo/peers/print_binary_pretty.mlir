// Transcribed from openxla/stablehlo stablehlo/tests/print_stablehlo.mlir, func @binary_ops, its CHECK lines.
func.func @binary_ops(%arg0: tensor<2xi1>, %arg1 : tensor<2xf32>, %arg2 : tensor<2xi32>) -> tensor<2xi1> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<2xi1>
  %1 = stablehlo.and %arg0, %arg0 : tensor<2xi1>
  %2 = stablehlo.atan2 %arg1, %arg1 : tensor<2xf32>
  %3 = stablehlo.divide %arg1, %arg1 : tensor<2xf32>
  %4 = stablehlo.maximum %arg1, %arg1 : tensor<2xf32>
  %5 = stablehlo.minimum %arg1, %arg1 : tensor<2xf32>
  %6 = stablehlo.multiply %arg1, %arg1 : tensor<2xf32>
  %7 = stablehlo.or %arg0, %arg0 : tensor<2xi1>
  %8 = stablehlo.power %arg1, %arg1 : tensor<2xf32>
  %9 = stablehlo.remainder %arg1, %arg1 : tensor<2xf32>
  %10 = stablehlo.shift_left %arg2, %arg2 : tensor<2xi32>
  %11 = stablehlo.shift_right_arithmetic %arg2, %arg2 : tensor<2xi32>
  %12 = stablehlo.shift_right_logical %arg2, %arg2 : tensor<2xi32>
  %13 = stablehlo.subtract %arg1, %arg1 : tensor<2xf32>
  %14 = stablehlo.xor %arg0, %arg0 : tensor<2xi1>
  func.return %0 : tensor<2xi1>
}
