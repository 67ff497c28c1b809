// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_to_all_c2: the peer's verifier refuses it ("split dimension has size 16, expected to be a multiple of split_count 5").
func.func @all_to_all_c2(%data: tensor<4x16xf32>) -> tensor<16x4xf32> {
  // expected-error@+2 {{failed to infer returned types}}
  // expected-error@+1 {{split dimension has size 16, expected to be a multiple of split_count 5}}
  %0 = "stablehlo.all_to_all"(%data) {
    split_dimension = 1 : i64,
    concat_dimension = 0 : i64,
    split_count = 5 : i64,
    replica_groups = dense<[[0, 1, 2, 3, 4]]> : tensor<1x5xi64>
  } : (tensor<4x16xf32>) -> tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}
