// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_reduce_c5: the peer's verifier refuses it ("The type of reduction-region's parameter at index 0 is different than the corresponding result type: 'tensor<f32>' vs 'tensor<i32>'").
func.func @all_reduce_c5(%operand: tensor<10xf32>) -> tensor<10xf32> {
  // expected-error@+1 {{The type of reduction-region's parameter at index 0 is different than the corresponding result type: 'tensor<f32>' vs 'tensor<i32>'}}
  %0 = "stablehlo.all_reduce"(%operand) ({
  ^bb0(%arg0: tensor<f32>, %arg1: tensor<f32>):
    %max = stablehlo.maximum %arg0, %arg1 : tensor<f32>
    %maxint = "stablehlo.convert"(%max) : (tensor<f32>) -> tensor<i32>
    "stablehlo.return"(%maxint) : (tensor<i32>) -> ()
  })
  {
    replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>
  } : (tensor<10xf32>) -> tensor<10xf32>
  func.return %0 : tensor<10xf32>
}

