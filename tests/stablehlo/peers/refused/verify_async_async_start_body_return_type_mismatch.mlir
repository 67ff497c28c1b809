// Transcribed from openxla/stablehlo stablehlo/tests/verify_async_ops.mlir, func @async_start_body_return_type_mismatch: the peer's verifier refuses it ("'stablehlo.async_start' op inferred type(s) '!stablehlo.future<tensor<8x8xf32>>' are incompatible with return type(s) of operation '!stablehlo.future<tensor<8x2xf32>>'").
// Tests that async_start fails if the body return type doesn't match the
// op return type (body returns tensor<8x8xf32> but future wraps tensor<8x2xf32>).
func.func @async_start_body_return_type_mismatch(%arg0: tensor<8x2xf32>) -> !stablehlo.future<tensor<8x2xf32>> {
  // expected-error@+2 {{'stablehlo.async_start' op inferred type(s) '!stablehlo.future<tensor<8x8xf32>>' are incompatible with return type(s) of operation '!stablehlo.future<tensor<8x2xf32>>'}}
  // expected-error@+1 {{'stablehlo.async_start' op failed to infer returned types}}
  %0 = "stablehlo.async_start"(%arg0) ({
  ^bb0(%barg0: tensor<8x2xf32>):
    %1 = "stablehlo.all_gather"(%barg0) {
      all_gather_dim = 1 : i64,
      replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>
    } : (tensor<8x2xf32>) -> tensor<8x8xf32>
    "stablehlo.return"(%1) : (tensor<8x8xf32>) -> ()
  }) : (tensor<8x2xf32>) -> !stablehlo.future<tensor<8x2xf32>>
  func.return %0: !stablehlo.future<tensor<8x2xf32>>
}

