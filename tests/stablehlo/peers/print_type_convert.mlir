// Transcribed from openxla/stablehlo stablehlo/tests/print_stablehlo.mlir, func @type_convert_ops, its CHECK lines.
func.func @type_convert_ops(%arg0 : tensor<2xf32>) -> () {
  %0 = stablehlo.convert %arg0 : (tensor<2xf32>) -> tensor<2xf64>
  %1 = stablehlo.reshape %arg0 : (tensor<2xf32>) -> tensor<1x2xf32>
  %2 = stablehlo.bitcast_convert %arg0 : (tensor<2xf32>) -> tensor<2xi32>
  "stablehlo.return"() : () -> ()
}
