// Transcribed from openxla/stablehlo stablehlo/tests/verify_async_ops.mlir, func @async_start_collective_permute (a valid module of the verifier's tests).
// Tests that async_start can successfully wrap a collective_permute operation.
// CHECK-LABEL: func @async_start_collective_permute
func.func @async_start_collective_permute(%arg0: tensor<128x32xf32>) -> !stablehlo.future<tensor<128x32xf32>> {
  %0 = "stablehlo.async_start"(%arg0) ({
  ^bb0(%barg0: tensor<128x32xf32>):
    %1 = "stablehlo.collective_permute"(%barg0) {
      source_target_pairs = dense<[[0, 1], [1, 2], [2, 3]]> : tensor<3x2xi64>
    } : (tensor<128x32xf32>) -> tensor<128x32xf32>
    "stablehlo.return"(%1) : (tensor<128x32xf32>) -> ()
  }) : (tensor<128x32xf32>) -> !stablehlo.future<tensor<128x32xf32>>
  func.return %0: !stablehlo.future<tensor<128x32xf32>>
}

