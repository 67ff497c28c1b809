// Transcribed from openxla/stablehlo stablehlo/tests/ops_stablehlo.mlir, func @collective_broadcast_c3 (a valid module of the verifier's tests).
// CHECK-LABEL: func @collective_broadcast_c3
func.func @collective_broadcast_c3(%operand: tensor<16x8xf32>) -> tensor<16x8xf32> {
  %0 = "stablehlo.collective_broadcast"(%operand) {
    replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>
  } : (tensor<16x8xf32>) -> tensor<16x8xf32>
  func.return %0 : tensor<16x8xf32>
}
