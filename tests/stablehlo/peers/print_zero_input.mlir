// Transcribed from openxla/stablehlo stablehlo/tests/print_stablehlo.mlir, func @zero_input, its CHECK lines.
func.func @zero_input() -> !stablehlo.token {
  %0 = stablehlo.replica_id : tensor<ui32>
  %1 = stablehlo.partition_id : tensor<ui32>
  %2 = stablehlo.create_token : !stablehlo.token
  return %2 : !stablehlo.token
}
