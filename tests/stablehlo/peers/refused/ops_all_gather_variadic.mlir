// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_gather_variadic (StableHLO's verifier and its tests take it; the spec's C6 and XLA's HLO verifier, InferAllGatherShape per operand, refuse it: tensor<2x2xf32> gathered over groups of 4 is 2x8, not 2x4).
func.func @all_gather_variadic(%arg0: tensor<8x2xf32>, %arg1: tensor<2x2xf32>) -> (tensor<8x8xf32>, tensor<2x4xf32>) {
  %0:2 = "stablehlo.all_gather"(%arg0, %arg1) {
    all_gather_dim = 1 : i64,
    channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>,
    replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>
  } : (tensor<8x2xf32>, tensor<2x2xf32>) -> (tensor<8x8xf32>, tensor<2x4xf32>)
  func.return %0#0, %0#1 : tensor<8x8xf32>, tensor<2x4xf32>
}
