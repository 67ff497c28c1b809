// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @all_to_all_c8: the peer's verifier refuses it ("group size of replica_groups must be 4").
func.func @all_to_all_c8(%data: tensor<4x16xf32>) -> tensor<16x4xf32> {
  // expected-error@+2 {{failed to infer returned types}}
  // expected-error@+1 {{group size of replica_groups must be 4}}
  %0 = "stablehlo.all_to_all"(%data) {
    split_dimension = 1 : i64,
    concat_dimension = 0 : i64,
    split_count = 4 : i64,
    replica_groups = dense<[[0, 2, 4], [1, 3, 5]]> : tensor<2x3xi64>
  } : (tensor<4x16xf32>) -> tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}
