// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_reduce_c5: the peer's verifier refuses it ("The shape of reduction-region's result type at index 0 differs from the op's corresponding init-value type: 'tensor<4xf32>' vs 'tensor<f32>'").
func.func @all_reduce_c5(%operand: tensor<10xf32>) -> tensor<10xf32> {
  // expected-error@+1 {{The shape of reduction-region's result type at index 0 differs from the op's corresponding init-value type: 'tensor<4xf32>' vs 'tensor<f32>'}}
  %0 = "stablehlo.all_reduce"(%operand) ({
  ^bb0(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>):
    %max = stablehlo.maximum %arg0, %arg1 : tensor<4xf32>
    "stablehlo.return"(%max) : (tensor<4xf32>) -> ()
  })
  {
    replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>
  } : (tensor<10xf32>) -> tensor<10xf32>
  func.return %0 : tensor<10xf32>
}
