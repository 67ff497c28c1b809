// Transcribed from openxla/stablehlo stablehlo/tests/transforms/mesh_axes_replica_group_compatibility.mlir, func @all_gather_rgv3 with the mesh it names (its CHECK line: the dense replica groups the mesh axes are).
module {
  // CHECK-LABEL: @all_gather_rgv3
  func.func @all_gather_rgv3(%arg0: tensor<4xf32>) -> tensor<8xf32> {
    // CHECK: replica_groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>
    %0 = "stablehlo.all_gather"(%arg0) {
      all_gather_dim = 0 : i64,
      replica_groups = #stablehlo.replica_group_mesh_axes<mesh = #stablehlo.mesh<axes = [#stablehlo.mesh_axis<name = "x", size = 2>, #stablehlo.mesh_axis<name = "y", size = 2>]>, axes = [#stablehlo.axis_ref<name = "y">]>
    } : (tensor<4xf32>) -> tensor<8xf32>

    return %0 : tensor<8xf32>
  }
}
