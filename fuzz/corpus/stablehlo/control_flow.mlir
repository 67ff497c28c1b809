// Collectives in stablehlo.while, stablehlo.if and stablehlo.case regions
// (issue 32): each region is read into the graph; collectives of one region
// combine, never across a region's boundary. `run` refuses the module.
module @control_flow attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {
  func.func @main(%x: tensor<8xf32>, %y: tensor<4xf32>, %p: tensor<i1>, %k: tensor<i32>) -> (tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<8xf32>) {
    %pre = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<8xf32>) -> tensor<8xf32>
    %w:2 = stablehlo.while(%it = %pre, %jt = %y) : tensor<8xf32>, tensor<4xf32>
     cond {
      %c = stablehlo.compare  LT, %k, %k,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %w0 = "stablehlo.all_reduce"(%it) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<8xf32>) -> tensor<8xf32>
      %w1 = "stablehlo.all_reduce"(%jt) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<4xf32>) -> tensor<4xf32>
      stablehlo.return %w0, %w1 : tensor<8xf32>, tensor<4xf32>
    }
    %i = "stablehlo.if"(%p) ({
      %t0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<8xf32>) -> tensor<8xf32>
      stablehlo.return %t0 : tensor<8xf32>
    }, {
      stablehlo.return %x : tensor<8xf32>
    }) : (tensor<i1>) -> tensor<8xf32>
    %q = "stablehlo.case"(%k) ({
      %b0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<8xf32>) -> tensor<8xf32>
      stablehlo.return %b0 : tensor<8xf32>
    }, {
      %b1 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<8xf32>) -> tensor<8xf32>
      stablehlo.return %b1 : tensor<8xf32>
    }) : (tensor<i32>) -> tensor<8xf32>
    return %w#0, %w#1, %i, %q : tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<8xf32>
  }
}
