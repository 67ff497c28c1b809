// Transcribed from openxla/stablehlo stablehlo/tests/transforms/mesh_axes_replica_group_compatibility.mlir, func @all_to_all_rgv3 with the mesh it names (its CHECK line: the dense replica groups the mesh axes are).
module {
  // CHECK-LABEL: @all_to_all_rgv3
  func.func @all_to_all_rgv3(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    // CHECK: replica_groups = dense<{{\[\[}}0, 2], [1, 3]]> : tensor<2x2xi64>
    %0 = "stablehlo.all_to_all"(%arg0) {
      concat_dimension = 0 : i64,
      split_dimension = 0 : i64,
      split_count = 2 : i64,
      replica_groups = #stablehlo.replica_group_mesh_axes<mesh = #stablehlo.mesh<axes = [#stablehlo.mesh_axis<name = "x", size = 2>, #stablehlo.mesh_axis<name = "y", size = 2>]>, axes = [#stablehlo.axis_ref<name = "x">]>
    } : (tensor<4xf32>) -> tensor<4xf32>

    return %0 : tensor<4xf32>
  }
}
