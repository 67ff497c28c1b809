// Transcribed from openxla/stablehlo stablehlo/tests/verify_async_ops.mlir, func @async_start_all_reduce (a valid module of the verifier's tests).

// Tests that async_start can successfully wrap an all_reduce operation.
// CHECK-LABEL: func @async_start_all_reduce
func.func @async_start_all_reduce(%arg0: tensor<4x4xf32>) -> !stablehlo.future<tensor<4x4xf32>> {
  %0 = "stablehlo.async_start"(%arg0) ({
  ^bb0(%barg0: tensor<4x4xf32>):
    %1 = "stablehlo.all_reduce"(%barg0) ({
    ^bb1(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %2 = "stablehlo.add"(%arg2, %arg3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%2) : (tensor<f32>) -> ()
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    "stablehlo.return"(%1) : (tensor<4x4xf32>) -> ()
  }) : (tensor<4x4xf32>) -> !stablehlo.future<tensor<4x4xf32>>
  func.return %0: !stablehlo.future<tensor<4x4xf32>>
}

