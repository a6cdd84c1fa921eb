// Package ckptlayout names the entries of a megago checkpoint directory that code
// outside package checkpoint reads or writes without loading a checkpoint: megago tune
// rolls a trial's checkpoints back to a rung and waits for its job lock. Package
// checkpoint defines its exported names from these, so the two cannot drift apart.
package ckptlayout
