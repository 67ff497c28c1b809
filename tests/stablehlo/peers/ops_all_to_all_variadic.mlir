// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_to_all_variadic (a valid module of the verifier's tests).
// CHECK-LABEL: func @all_to_all_variadic
func.func @all_to_all_variadic(%data0: tensor<4x16xf32>, %data1: tensor<5x16xf64>) -> (tensor<16x4xf32>, tensor<20x4xf64>) {
  %0:2 = "stablehlo.all_to_all"(%data0, %data1) {
    split_dimension = 1 : i64,
    concat_dimension = 0 : i64,
    split_count = 4 : i64,
    replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>,
    channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>
  } : (tensor<4x16xf32>, tensor<5x16xf64>) -> (tensor<16x4xf32>, tensor<20x4xf64>)
  func.return %0#0, %0#1 : tensor<16x4xf32>, tensor<20x4xf64>
}
