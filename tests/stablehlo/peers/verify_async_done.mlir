// Transcribed from openxla/stablehlo stablehlo/tests/verify_async_ops.mlir, func @async_done (a valid module of the verifier's tests).
// Tests that async_done can successfully wait for an async_start operation.
// CHECK-LABEL: func @async_done
func.func @async_done(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = "stablehlo.async_start"(%arg0) ({
  ^bb0(%barg0: tensor<4x4xf32>):
    %2 = "stablehlo.all_reduce"(%barg0) ({
    ^bb1(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %3 = "stablehlo.add"(%arg1, %arg2) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%3) : (tensor<f32>) -> ()
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    "stablehlo.return"(%2) : (tensor<4x4xf32>) -> ()
  }) : (tensor<4x4xf32>) -> !stablehlo.future<tensor<4x4xf32>>
  %1 = "stablehlo.async_done"(%0) : (!stablehlo.future<tensor<4x4xf32>>) -> tensor<4x4xf32>
  func.return %1: tensor<4x4xf32>
}

