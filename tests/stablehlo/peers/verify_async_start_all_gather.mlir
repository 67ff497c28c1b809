// Transcribed from openxla/stablehlo stablehlo/tests/verify_async_ops.mlir, func @async_start_all_gather (a valid module of the verifier's tests).
// Tests that async_start can successfully wrap an all_gather operation.
// CHECK-LABEL: func @async_start_all_gather
func.func @async_start_all_gather(%arg0: tensor<8x2xf32>) -> !stablehlo.future<tensor<8x8xf32>> {
  %0 = "stablehlo.async_start"(%arg0) ({
  ^bb0(%barg0: tensor<8x2xf32>):
    %1 = "stablehlo.all_gather"(%barg0) {
      all_gather_dim = 1 : i64,
      replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>
    } : (tensor<8x2xf32>) -> tensor<8x8xf32>
    "stablehlo.return"(%1) : (tensor<8x8xf32>) -> ()
  }) : (tensor<8x2xf32>) -> !stablehlo.future<tensor<8x8xf32>>
  func.return %0: !stablehlo.future<tensor<8x8xf32>>
}

