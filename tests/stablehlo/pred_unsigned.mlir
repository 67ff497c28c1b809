// i1 (bool) and unsigned collectives as JAX exports them: i1 reduces by
// stablehlo.or / stablehlo.and, unsigned ones compare unsigned (the twin of
// tests/hlo/pred_unsigned.hlo; tests/e2e/stablehlo.sh runs both).
module @pred_unsigned attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {
  func.func public @main(%p: tensor<16xi1>, %q: tensor<16xui32>, %r: tensor<8xui64>, %s: tensor<4x2xui16>) -> (tensor<16xi1>, tensor<16xi1>, tensor<16xui32>, tensor<8xui64>, tensor<8x2xui16>, tensor<2x2xui16>) {
    %any = "stablehlo.all_reduce"(%p) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<i1>, %b: tensor<i1>):
      %o = stablehlo.or %a, %b : tensor<i1>
      stablehlo.return %o : tensor<i1>
    }) : (tensor<16xi1>) -> tensor<16xi1>
    %all = "stablehlo.all_reduce"(%p) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<i1>, %b: tensor<i1>):
      %o = stablehlo.and %a, %b : tensor<i1>
      stablehlo.return %o : tensor<i1>
    }) : (tensor<16xi1>) -> tensor<16xi1>
    %mx = "stablehlo.all_reduce"(%q) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<ui32>, %b: tensor<ui32>):
      %o = stablehlo.maximum %a, %b : tensor<ui32>
      stablehlo.return %o : tensor<ui32>
    }) : (tensor<16xui32>) -> tensor<16xui32>
    %sm = "stablehlo.all_reduce"(%r) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<ui64>, %b: tensor<ui64>):
      %o = stablehlo.add %a, %b : tensor<ui64>
      stablehlo.return %o : tensor<ui64>
    }) : (tensor<8xui64>) -> tensor<8xui64>
    %ag = "stablehlo.all_gather"(%s) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> : (tensor<4x2xui16>) -> tensor<8x2xui16>
    %rs = "stablehlo.reduce_scatter"(%s) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, scatter_dimension = 0 : i64}> ({
    ^bb0(%a: tensor<ui16>, %b: tensor<ui16>):
      %o = stablehlo.minimum %a, %b : tensor<ui16>
      stablehlo.return %o : tensor<ui16>
    }) : (tensor<4x2xui16>) -> tensor<2x2xui16>
    return %any, %all, %mx, %sm, %ag, %rs : tensor<16xi1>, tensor<16xi1>, tensor<16xui32>, tensor<8xui64>, tensor<8x2xui16>, tensor<2x2xui16>
  }
}
