package optim

import (
	"fmt"
	"maps"
	"slices"

	"megago/tensor"
)

// State is the state of an optimizer, loss scaler or schedule: per-parameter tensors and
// named scalars, in a form a checkpoint can save from every rank and reassemble at
// another parallel layout.
type State struct {
	Tensors []StateTensor
	Scalars map[string]float64
}

// StateTensor is one rank's part of a per-parameter state tensor. The parameter's TP
// shard is Region of the global parameter; this rank holds the elements [Flat[0],
// Flat[1]) of that region's row-major flattening: all of it, unless the distributed
// optimizer split the parameter between DP ranks (Megatron's flattened_range).
type StateTensor struct {
	// Name is "optimizer.state.<kind>.<parameter name>", kind being exp_avg, exp_avg_sq,
	// momentum_buffer or fp32_param (master weights of BF16/F16 parameters).
	Name   string
	Region tensor.Region
	Flat   [2]int
	Tensor *tensor.Tensor // [Flat[1] − Flat[0]]
}

// scalars returns the named scalars, or an error naming the first one missing.
func (s *State) scalars(names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	for i, n := range names {
		v, ok := s.Scalars[n]
		if !ok {
			return nil, fmt.Errorf("optim: loading state: scalar %s missing", n)
		}
		out[i] = v
	}
	return out, nil
}

// merge adds other's tensors and scalars to s.
func (s *State) merge(other *State) {
	s.Tensors = append(s.Tensors, other.Tensors...)
	maps.Copy(s.Scalars, other.Scalars)
}

// StateDict returns the optimizer's state on this rank: the rule's state tensors and the
// master weights, as views of the live state (writing into them changes the optimizer),
// the step count, and the state of the loss scaler and schedule if configured.
func (o *Optimizer) StateDict() *State {
	st := &State{Scalars: map[string]float64{"optimizer.step": float64(o.steps)}}
	names := o.rule.stateNames()
	for _, sh := range o.shards {
		for _, seg := range sh.segs {
			p, n := seg.param, seg.hi-seg.lo
			add := func(kind string, t *tensor.Tensor) {
				st.Tensors = append(st.Tensors, StateTensor{Name: "optimizer.state." + kind + "." + p.Name,
					Region: p.Region(), Flat: [2]int{seg.flat, seg.flat + n}, Tensor: t.Narrow(0, seg.lo, n)})
			}
			for i, kind := range names {
				add(kind, sh.state[i])
			}
			if sh.model != nil {
				add("fp32_param", sh.master)
			}
		}
	}
	if o.cfg.Scaler != nil {
		st.merge(o.cfg.Scaler.StateDict())
	}
	if o.cfg.Schedule != nil {
		st.merge(o.cfg.Schedule.StateDict())
	}
	return st
}

// Load restores a state laid out as this rank's StateDict: every tensor it names must be
// present with the same region and flat range (a checkpoint saved at another layout is
// resharded into that form first). BF16/F16 parameters are refreshed from the loaded
// master weights. It returns an error naming the first missing or mismatched entry; every
// tensor is checked before any is written.
func (o *Optimizer) Load(st *State) error {
	byName := map[string]StateTensor{}
	for _, t := range st.Tensors {
		byName[t.Name] = t
	}
	want := o.StateDict()
	for _, w := range want.Tensors {
		got, ok := byName[w.Name]
		switch {
		case !ok:
			return fmt.Errorf("optim: loading state: %s missing", w.Name)
		case !sameRegion(got.Region, w.Region) || got.Flat != w.Flat || got.Tensor.Numel() != w.Tensor.Numel():
			return fmt.Errorf("optim: loading state: %s holds %v of %v [%d, %d), want %v of %v [%d, %d)", w.Name,
				got.Region.Size, got.Region.Full, got.Flat[0], got.Flat[1], w.Region.Size, w.Region.Full, w.Flat[0], w.Flat[1])
		}
	}
	v, err := st.scalars("optimizer.step")
	if err != nil {
		return err
	}
	if o.cfg.Scaler != nil {
		if err := o.cfg.Scaler.Load(st); err != nil {
			return err
		}
	}
	if o.cfg.Schedule != nil {
		if err := o.cfg.Schedule.Load(st); err != nil {
			return err
		}
	}
	for _, w := range want.Tensors {
		w.Tensor.CopyFrom(byName[w.Name].Tensor.Reshape(w.Tensor.Numel()))
	}
	for _, sh := range o.shards {
		if sh.model != nil {
			sh.model.CopyFrom(sh.master)
		}
	}
	o.steps = int(v[0])
	return nil
}

func sameRegion(a, b tensor.Region) bool {
	return a.Full.Equal(b.Full) && slices.Equal(a.Start, b.Start) && a.Size.Equal(b.Size)
}
