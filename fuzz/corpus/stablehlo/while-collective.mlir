// A collective inside a while body: collfuse does not run loops, so the while
// is Opaque and its warning counts the collective (never hidden); --strict refuses.
func.func @main(%arg0: tensor<4xf32>, %n: tensor<i64>) -> tensor<4xf32> {
  %0:2 = stablehlo.while(%iterArg = %arg0, %i = %n) : tensor<4xf32>, tensor<i64>
   cond {
    %c = stablehlo.compare  LT, %i, %n,  SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %1 = "stablehlo.all_reduce"(%iterArg) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    stablehlo.return %1, %i : tensor<4xf32>, tensor<i64>
  }
  return %0#0 : tensor<4xf32>
}
