// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_reduce_c5: the peer's verifier refuses it ("Reduction-region must take 2 parameters, but takes 3 parameter(s)").
func.func @all_reduce_c5(%operand: tensor<10xf32>) -> tensor<10xf32> {
  // expected-error@+1 {{Reduction-region must take 2 parameters, but takes 3 parameter(s)}}
  %0 = "stablehlo.all_reduce"(%operand) ({
  ^bb0(%arg0: tensor<f32>, %arg1: tensor<f32>, %arg2: tensor<f32>):
    %max = stablehlo.maximum %arg0, %arg1 : tensor<f32>
    "stablehlo.return"(%max) : (tensor<f32>) -> ()
  })
  {
    replica_groups = dense<[[0, 2, 4, -1], [1, 3, -1, -1]]> : tensor<2x4xi64>
  } : (tensor<10xf32>) -> tensor<10xf32>
  func.return %0 : tensor<10xf32>
}

