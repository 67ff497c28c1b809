func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
%r0 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r1 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r2 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r3 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r4 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r5 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r6 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r7 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r8 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r9 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r10 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r11 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r12 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r13 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r14 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r15 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r16 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r17 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r18 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r19 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r20 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r21 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r22 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r23 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r24 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r25 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r26 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r27 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r28 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
%r29 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
^bb0(%x: tensor<f32>, %y: tensor<f32>):
  %v = stablehlo.add %x, %y : tensor<f32>
  stablehlo.return %v : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r29 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r28 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r27 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r26 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r25 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r24 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r23 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r22 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r21 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r20 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r19 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r18 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r17 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r16 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r15 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r14 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r13 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r12 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r11 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r10 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r9 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r8 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r7 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r6 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r5 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r4 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r3 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r2 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
stablehlo.return %r1 : tensor<f32>
}) : (tensor<4xf32>) -> tensor<4xf32>
return %r0 : tensor<4xf32>
}
