// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @collective_permute_c2: the peer's verifier refuses it ("duplicate sources not allowed").
func.func @collective_permute_c2(%arg0: tensor<128x32xf32>) -> tensor<128x32xf32> {
  // expected-error@+1 {{duplicate sources not allowed}}
  %0 = "stablehlo.collective_permute"(%arg0) {
    source_target_pairs = dense<[[0, 1], [0, 2], [2, 3]]> : tensor<3x2xi64>
  } : (tensor<128x32xf32>) -> tensor<128x32xf32>
  func.return %0 : tensor<128x32xf32>
}
