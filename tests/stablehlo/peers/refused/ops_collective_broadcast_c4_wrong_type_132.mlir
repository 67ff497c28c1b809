// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @collective_broadcast_c4_wrong_type: the peer's verifier refuses it ("last operand of collective_broadcast with has_dynamic_root=true must be a rank-1 i32 tensor").
// has_dynamic_root=true: last operand must be rank-1 i32.
func.func @collective_broadcast_c4_wrong_type(%operand: tensor<4xf32>, %root: tensor<1xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{last operand of collective_broadcast with has_dynamic_root=true must be a rank-1 i32 tensor}}
  %0 = "stablehlo.collective_broadcast"(%operand, %root) {
    replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
    has_dynamic_root
  } : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

