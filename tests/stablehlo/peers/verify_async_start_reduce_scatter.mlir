// Transcribed from openxla/stablehlo stablehlo/tests/verify_async_ops.mlir, func @async_start_reduce_scatter (a valid module of the verifier's tests).
// Tests that async_start can successfully wrap a reduce_scatter operation.
// CHECK-LABEL: func @async_start_reduce_scatter
func.func @async_start_reduce_scatter(%arg0: tensor<4x16xf32>) -> !stablehlo.future<tensor<4x4xf32>> {
  %0 = "stablehlo.async_start"(%arg0) ({
  ^bb0(%barg0: tensor<4x16xf32>):
    %1 = "stablehlo.reduce_scatter"(%barg0) ({
      ^bb1(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %2 = stablehlo.add %arg2, %arg3 : tensor<f32>
      "stablehlo.return"(%2) : (tensor<f32>) -> ()
    }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>,
        scatter_dimension = 1 : i64} : (tensor<4x16xf32>) -> tensor<4x4xf32>
    "stablehlo.return"(%1) : (tensor<4x4xf32>) -> ()
  }) : (tensor<4x16xf32>) -> !stablehlo.future<tensor<4x4xf32>>
  func.return %0: !stablehlo.future<tensor<4x4xf32>>
}

