// Transcribed from openxla/stablehlo stablehlo/tests/transforms/mesh_axes_replica_group_compatibility.mlir, func @all_reduce_sdy_mesh_max with the mesh it names (its CHECK line: the dense replica groups the mesh axes are).
module {
  "sdy.mesh"() {sym_name = "sdy_mesh_max", stablehlo.mesh = {axes = [], device_ids = dense<0> : tensor<1xi64>}} : () -> ()
  // CHECK-LABEL: @all_reduce_sdy_mesh_max
  func.func @all_reduce_sdy_mesh_max(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    // CHECK: replica_groups = dense<0> : tensor<1x1xi64>
    %0 = "stablehlo.all_reduce"(%arg0) ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %1 = "stablehlo.add"(%arg1, %arg2) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%1) : (tensor<f32>) -> ()
    }) {
      replica_groups = #stablehlo.replica_group_mesh_axes<mesh = @sdy_mesh_max, axes = []>
    } : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
