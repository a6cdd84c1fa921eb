// Package golden reads the PyTorch golden files that megago's model tests compare against.
//
// The files live in nn/testdata/golden (gpt2.json, bert.json, t5.json, llama.json) and are
// written by nn/testdata/golden/gen.py, which builds each model by hand to the semantics of
// its Hugging Face class (GPT2LMHeadModel, BertForPreTraining, T5ForConditionalGeneration
// with T5 v1.0 settings, LlamaForCausalLM), runs one forward and backward pass in float32
// with dropout off, and records:
//
//   - Config: every hyperparameter, named as in the Hugging Face config class;
//   - Inputs: integer tensors (token ids, masks, labels; -100 marks an ignored label);
//   - Params and Grads: every parameter under its exact Hugging Face state-dict name, and
//     d Loss / d param for each (a tied tensor's grad is the sum over all of its uses);
//     ParamNames lists them in state-dict order;
//   - Aliases: other state-dict names of tied tensors (lm_head.weight -> transformer.wte.weight);
//   - Logits, Loss, and Outputs (intermediate activations, loss parts);
//   - Tables: other integer tensors (T5's relative-position buckets);
//   - Notes: the conventions a Go implementation must follow, in words.
//
// The reading order is Tensor and IntTensor, File, Load, then File's accessors.
//
// Invariants checked by Load: every tensor's data length is the product of its shape;
// ParamNames, Params and Grads name the same parameters, and each grad has its param's
// shape; every alias names a parameter; Loss is finite. A File is read-only by convention:
// tests copy what they mutate.
//
// Floats are stored as the shortest decimal that reads back as the same float32, so Data
// holds the exact float32 values PyTorch computed. Loss is that float32 value widened to
// float64; compare it at float32 precision.
//
// Error policy: Load returns an error that names the file and the offending entry. The
// accessors (ConfigInt, Param, ...) panic when asked for a name the file does not have,
// listing the names it does have: asking for a missing name is a bug in the test.
//
// Paths are relative to the test's package directory, e.g. from package nn:
// golden.Load("testdata/golden/gpt2.json").
package golden
