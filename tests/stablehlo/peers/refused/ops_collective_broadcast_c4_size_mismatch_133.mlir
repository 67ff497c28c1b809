// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @collective_broadcast_c4_size_mismatch: the peer's verifier refuses it ("last operand of collective_broadcast with has_dynamic_root=true must have the same number of elements as data operands (2), but got 1").
// has_dynamic_root=true: root tensor size must match number of data operands.
func.func @collective_broadcast_c4_size_mismatch(%operand0: tensor<4xf32>, %operand1: tensor<4xf32>, %root: tensor<1xi32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error@+1 {{last operand of collective_broadcast with has_dynamic_root=true must have the same number of elements as data operands (2), but got 1}}
  %0:2 = "stablehlo.collective_broadcast"(%operand0, %operand1, %root) {
    replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
    has_dynamic_root
  } : (tensor<4xf32>, tensor<4xf32>, tensor<1xi32>) -> (tensor<4xf32>, tensor<4xf32>)
  func.return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}

