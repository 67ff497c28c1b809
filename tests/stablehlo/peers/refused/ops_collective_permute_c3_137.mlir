// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @collective_permute_c3: the peer's verifier refuses it ("duplicate targets not allowed").
func.func @collective_permute_c3(%arg0: tensor<128x32xf32>) -> tensor<128x32xf32> {
  // expected-error@+1 {{duplicate targets not allowed}}
  %0 = "stablehlo.collective_permute"(%arg0) {
    source_target_pairs = dense<[[0, 1], [1, 2], [2, 1]]> : tensor<3x2xi64>
  } : (tensor<128x32xf32>) -> tensor<128x32xf32>
  func.return %0 : tensor<128x32xf32>
}
