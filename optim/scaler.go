package optim

import (
	"fmt"
	"math"
)

// LossScaler multiplies the loss before backward so that fp16 gradients do not underflow;
// the optimizer divides the gradients by the same scale. Step reports whether the
// gradients overflowed (on any rank of the group) through Update, and skips that step.
type LossScaler interface {
	// Scale returns the current loss scale.
	Scale() float64
	// Update records whether the last step's gradients held an inf or a NaN.
	Update(foundInf bool)
	// StateDict returns the scaler's state as scalars; Load restores it.
	StateDict() *State
	Load(st *State) error
}

// ConstantScaler is a fixed loss scale (Megatron's --loss-scale). Steps whose gradients
// overflow are still skipped.
type ConstantScaler struct{ Value float64 }

// Scale returns the fixed scale.
func (c ConstantScaler) Scale() float64 { return c.Value }

// Update does nothing: the scale never changes.
func (ConstantScaler) Update(bool) {}

// StateDict returns the scale, for reference.
func (c ConstantScaler) StateDict() *State {
	return &State{Scalars: map[string]float64{"grad_scaler.scale": c.Value}}
}

// Load does nothing: a constant scaler has no state to restore.
func (ConstantScaler) Load(*State) error { return nil }

// DynamicScalerConfig configures a DynamicScaler; zero fields take Megatron's defaults.
type DynamicScalerConfig struct {
	InitialScale   float64 // 2^32
	MinScale       float64 // 1
	GrowthFactor   float64 // 2
	BackoffFactor  float64 // 0.5
	GrowthInterval int     // 1000 consecutive clean steps before the scale grows
	Hysteresis     int     // 2 overflows before the first backoff
}

// DynamicScaler is Megatron's DynamicGradScaler. On a step with inf/nan gradients it
// resets the clean-step counter and decrements the hysteresis counter, and multiplies the
// scale by BackoffFactor (not below MinScale) when that counter is ≤ 0. After
// GrowthInterval consecutive clean steps it multiplies the scale by GrowthFactor and
// resets both counters. The hysteresis counter is reset only there, so after a first
// backoff every further overflow backs off again until the scale grows.
type DynamicScaler struct {
	cfg        DynamicScalerConfig
	scale      float64
	growth     int // consecutive clean steps
	hysteresis int // overflows left before a backoff
}

// NewDynamicScaler returns a scaler at cfg's initial scale, or an error for an invalid
// configuration.
func NewDynamicScaler(cfg DynamicScalerConfig) (*DynamicScaler, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.InitialScale, math.Exp2(32))
	def(&cfg.MinScale, 1)
	def(&cfg.GrowthFactor, 2)
	def(&cfg.BackoffFactor, 0.5)
	if cfg.GrowthInterval == 0 {
		cfg.GrowthInterval = 1000
	}
	if cfg.Hysteresis == 0 {
		cfg.Hysteresis = 2
	}
	if !(cfg.MinScale > 0 && cfg.InitialScale >= cfg.MinScale && cfg.GrowthFactor > 1 &&
		cfg.BackoffFactor > 0 && cfg.BackoffFactor < 1 && cfg.GrowthInterval > 0 && cfg.Hysteresis > 0) {
		return nil, fmt.Errorf("optim: invalid dynamic loss scaler %+v: need 0 < min ≤ initial, growth > 1, 0 < backoff < 1, interval and hysteresis ≥ 1", cfg)
	}
	return &DynamicScaler{cfg: cfg, scale: cfg.InitialScale, hysteresis: cfg.Hysteresis}, nil
}

// Scale returns the current loss scale.
func (d *DynamicScaler) Scale() float64 { return d.scale }

// GrowthTracker returns the number of consecutive clean steps since the last overflow
// or growth.
func (d *DynamicScaler) GrowthTracker() int { return d.growth }

// HysteresisTracker returns the number of overflows left before the scale backs off.
func (d *DynamicScaler) HysteresisTracker() int { return d.hysteresis }

// Update applies Megatron's rules for one step.
func (d *DynamicScaler) Update(foundInf bool) {
	if foundInf {
		d.growth = 0
		d.hysteresis--
		if d.hysteresis <= 0 {
			d.scale = max(d.scale*d.cfg.BackoffFactor, d.cfg.MinScale)
		}
		return
	}
	d.growth++
	if d.growth == d.cfg.GrowthInterval {
		d.growth = 0
		d.hysteresis = d.cfg.Hysteresis
		d.scale *= d.cfg.GrowthFactor
	}
}

// StateDict returns the scale and both counters, under Megatron's names.
func (d *DynamicScaler) StateDict() *State {
	return &State{Scalars: map[string]float64{
		"grad_scaler.scale":              d.scale,
		"grad_scaler.growth_tracker":     float64(d.growth),
		"grad_scaler.hysteresis_tracker": float64(d.hysteresis),
	}}
}

// Load restores the scale and counters saved by StateDict.
func (d *DynamicScaler) Load(st *State) error {
	v, err := st.scalars("grad_scaler.scale", "grad_scaler.growth_tracker", "grad_scaler.hysteresis_tracker")
	if err != nil {
		return err
	}
	if !(v[0] > 0) {
		return fmt.Errorf("optim: loading loss scaler: scale %v is not positive", v[0])
	}
	d.scale, d.growth, d.hysteresis = v[0], int(v[1]), int(v[2])
	return nil
}
