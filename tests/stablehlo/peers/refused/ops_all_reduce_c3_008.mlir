// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_reduce_c3: the peer's verifier refuses it ("replica id #2 not seen in replica groups").
func.func @all_reduce_c3(%operand: tensor<10xf32>) -> tensor<10xf32> {
  //  expected-error@+1 {{replica id #2 not seen in replica groups}}
  %0 = "stablehlo.all_reduce"(%operand) ({
  ^bb0(%arg0: tensor<f32>, %arg1: tensor<f32>):
    %max = stablehlo.maximum %arg0, %arg1 : tensor<f32>
    "stablehlo.return"(%max) : (tensor<f32>) -> ()
  })
  {
    replica_groups = dense<[[0, 1, 3]]> : tensor<1x3xi64>
  } : (tensor<10xf32>) -> tensor<10xf32>
  func.return %0 : tensor<10xf32>
}

