// Transcribed from openxla/stablehlo stablehlo/tests/verify_async_ops.mlir, func @async_done_result_type_mismatch: the peer's verifier refuses it ("'stablehlo.async_done' op inferred type(s) 'tensor<4x4xf32>' are incompatible with return type(s) of operation 'tensor<4x4xi32>'").
// Tests that async_done fails if the result type doesn't match the future's
// inner type.
func.func @async_done_result_type_mismatch(%arg0: tensor<4x4xf32>) -> tensor<4x4xi32> {
  %0 = "stablehlo.async_start"(%arg0) ({
  ^bb0(%barg0: tensor<4x4xf32>):
    %1 = "stablehlo.all_reduce"(%barg0) ({
    ^bb1(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %2 = "stablehlo.add"(%arg2, %arg3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%2) : (tensor<f32>) -> ()
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    "stablehlo.return"(%1) : (tensor<4x4xf32>) -> ()
  }) : (tensor<4x4xf32>) -> !stablehlo.future<tensor<4x4xf32>>
  // expected-error@+2 {{'stablehlo.async_done' op inferred type(s) 'tensor<4x4xf32>' are incompatible with return type(s) of operation 'tensor<4x4xi32>'}}
  // expected-error@+1 {{'stablehlo.async_done' op failed to infer returned types}}
  %1 = "stablehlo.async_done"(%0) : (!stablehlo.future<tensor<4x4xf32>>) -> tensor<4x4xi32>
  func.return %1: tensor<4x4xi32>
}
