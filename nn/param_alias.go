package nn

import "megago/nn/param"

// Param is a trainable tensor (this rank's shard of it) with the metadata that optimizers,
// gradient reduction and checkpoints need: see param.Param, where the type lives so that
// packages needing only a parameter (optim) need not import the layers. The alias keeps
// nn.Param the name layers, models and their callers use; nn creates Params (newParam,
// with a Builder and an Init).
type Param = param.Param
