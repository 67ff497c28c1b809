// Transcribed from openxla/stablehlo stablehlo/tests/print_stablehlo.mlir, func @unary_ops, its CHECK lines (the pretty form stablehlo-opt prints).
func.func @unary_ops(%arg0 : tensor<2xi32>, %arg1 : tensor<2xf32>) -> () {
  %0 = stablehlo.abs %arg0 : tensor<2xi32>
  %1 = stablehlo.ceil %arg1 : tensor<2xf32>
  %2 = stablehlo.count_leading_zeros %arg0 : tensor<2xi32>
  %3 = stablehlo.convert %arg0 : (tensor<2xi32>) -> tensor<2xf32>
  %4 = stablehlo.cosine %arg1 : tensor<2xf32>
  %5 = stablehlo.exponential %arg1 : tensor<2xf32>
  %6 = stablehlo.exponential_minus_one %arg1 : tensor<2xf32>
  %7 = stablehlo.floor %arg1 : tensor<2xf32>
  %8 = stablehlo.imag %arg1 : tensor<2xf32>
  %9 = stablehlo.is_finite %arg1 : (tensor<2xf32>) -> tensor<2xi1>
  %10 = stablehlo.log %arg1 : tensor<2xf32>
  %11 = stablehlo.log_plus_one %arg1 : tensor<2xf32>
  %12 = stablehlo.logistic %arg1 : tensor<2xf32>
  %13 = stablehlo.not %arg0 : tensor<2xi32>
  %14 = stablehlo.negate %arg1 : tensor<2xf32>
  %15 = stablehlo.popcnt %arg0 : tensor<2xi32>
  %16 = stablehlo.real %arg1 : tensor<2xf32>
  %17 = stablehlo.round_nearest_afz %arg1 : tensor<2xf32>
  %18 = stablehlo.round_nearest_even %arg1 : tensor<2xf32>
  %19 = stablehlo.sign %arg1 : tensor<2xf32>
  %20 = stablehlo.sine %arg1 : tensor<2xf32>
  %21 = stablehlo.sqrt %arg1 : tensor<2xf32>
  %22 = stablehlo.tanh %arg1 : tensor<2xf32>
  stablehlo.return %0 : tensor<2xi32>
}
