package optim

import (
	"fmt"
	"math"
)

// DecayStyle is how the learning rate decays after warmup.
type DecayStyle uint8

// Decay styles (Megatron's --lr-decay-style). The zero value is Megatron's default.
const (
	DecayLinear      DecayStyle = iota // max → min linearly over the decay steps
	DecayConstant                      // max after warmup
	DecayCosine                        // half a cosine from max to min
	DecayInverseSqrt                   // max·√W/√step, floored at min
	DecayWSD                           // warmup-stable-decay: max, then annealed over WSDDecaySteps
)

// WSDStyle is how a warmup-stable-decay schedule anneals.
type WSDStyle uint8

// Annealing styles (Megatron's --lr-wsd-decay-style); r runs from 0 to 1 over the
// annealing steps. The zero value is Megatron's default.
const (
	WSDExponential WSDStyle = iota // coeff = 2·0.5^r − 1
	WSDLinear                      // coeff = 1 − r
	WSDCosine                      // coeff = (cos(πr) + 1)/2
	WSDMinusSqrt                   // coeff = 1 − √r ("1-sqrt")
)

// WDStyle is how weight decay moves from its start to its end value.
type WDStyle uint8

// Weight-decay increment styles (Megatron's --weight-decay-incr-style); the zero value is
// Megatron's default.
const (
	WDConstant WDStyle = iota // StartWD throughout (StartWD must equal EndWD)
	WDLinear                  // start + (end − start)·step/WDIncrSteps
	WDCosine                  // start + (end − start)·(cos(π(1 − step/WDIncrSteps)) + 1)/2
)

// ScheduleConfig configures a Schedule, in optimizer steps (Megatron counts samples when
// training by samples; an iteration-based run is the same with steps = iterations).
type ScheduleConfig struct {
	// InitLR is the learning rate at step 0, from which warmup rises linearly to MaxLR at
	// WarmupSteps; MinLR is the floor reached at DecaySteps and kept after it.
	InitLR, MaxLR, MinLR    float64
	WarmupSteps, DecaySteps int
	Decay                   DecayStyle
	// WSDDecaySteps is the length of the annealing phase of DecayWSD, which ends at
	// DecaySteps.
	WSDDecaySteps int
	WSDDecay      WSDStyle
	// StartWD and EndWD bound the weight decay, which moves between them over
	// WDIncrSteps steps (Megatron sets both to --weight-decay by default).
	StartWD, EndWD float64
	WDIncrSteps    int
	WDIncr         WDStyle
}

// Validate reports the first invalid setting, as Megatron's OptimizerParamScheduler
// asserts them.
func (c ScheduleConfig) Validate() error {
	switch {
	case c.MinLR < 0 || c.MaxLR < c.MinLR || c.InitLR < 0:
		return fmt.Errorf("optim: schedule lr init %v max %v min %v: need 0 ≤ min ≤ max and init ≥ 0", c.InitLR, c.MaxLR, c.MinLR)
	case c.WarmupSteps < 0:
		return fmt.Errorf("optim: schedule warmup steps %d < 0", c.WarmupSteps)
	case c.Decay > DecayWSD || c.WSDDecay > WSDMinusSqrt || c.WDIncr > WDCosine:
		return fmt.Errorf("optim: schedule styles %d/%d/%d unknown", c.Decay, c.WSDDecay, c.WDIncr)
	case c.Decay != DecayConstant && c.DecaySteps <= 0:
		return fmt.Errorf("optim: schedule decay steps %d must be positive", c.DecaySteps)
	case c.Decay != DecayConstant && c.WarmupSteps >= c.DecaySteps:
		return fmt.Errorf("optim: schedule warmup steps %d must be fewer than decay steps %d", c.WarmupSteps, c.DecaySteps)
	case c.Decay == DecayWSD && (c.WSDDecaySteps <= 0 || c.WSDDecaySteps > c.DecaySteps):
		return fmt.Errorf("optim: schedule WSD decay steps %d must lie in [1, %d]", c.WSDDecaySteps, c.DecaySteps)
	case c.StartWD < 0 || c.EndWD < 0:
		return fmt.Errorf("optim: schedule weight decay %v → %v is negative", c.StartWD, c.EndWD)
	case c.WDIncr == WDConstant && c.StartWD != c.EndWD:
		return fmt.Errorf("optim: constant weight decay needs start %v = end %v", c.StartWD, c.EndWD)
	case c.WDIncr != WDConstant && c.WDIncrSteps <= 0:
		return fmt.Errorf("optim: weight-decay increment steps %d must be positive", c.WDIncrSteps)
	}
	return nil
}

// Schedule gives the learning rate and weight decay of each step, following Megatron's
// OptimizerParamScheduler. It counts steps from 0; the optimizer reads LR and WD before
// an update and advances the schedule after it.
type Schedule struct {
	cfg   ScheduleConfig
	steps int
}

// NewSchedule returns a schedule at step 0, or cfg's validation error.
func NewSchedule(cfg ScheduleConfig) (*Schedule, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Schedule{cfg: cfg}, nil
}

// Step advances the schedule by n steps.
func (s *Schedule) Step(n int) { s.steps += n }

// Steps returns the number of steps taken.
func (s *Schedule) Steps() int { return s.steps }

// LR returns the learning rate at the current step.
func (s *Schedule) LR() float64 { return s.LRAt(s.steps) }

// WD returns the weight decay at the current step.
func (s *Schedule) WD() float64 { return s.WDAt(s.steps) }

// LRAt returns the learning rate at step, in the order of Megatron's get_lr: warmup,
// constant, past the decay, inverse square root, then the decay styles.
func (s *Schedule) LRAt(step int) float64 {
	c := s.cfg
	if c.WarmupSteps > 0 && step <= c.WarmupSteps {
		return c.InitLR + (c.MaxLR-c.InitLR)*float64(step)/float64(c.WarmupSteps)
	}
	if c.Decay == DecayConstant {
		return c.MaxLR
	}
	if step > c.DecaySteps {
		return c.MinLR
	}
	if c.Decay == DecayInverseSqrt {
		w, n := float64(max(c.WarmupSteps, 1)), float64(max(step, 1))
		return max(c.MinLR, c.MaxLR*math.Sqrt(w)/math.Sqrt(n))
	}
	ratio := float64(step-c.WarmupSteps) / float64(c.DecaySteps-c.WarmupSteps)
	var coeff float64
	switch c.Decay {
	case DecayLinear:
		coeff = 1 - ratio
	case DecayCosine:
		coeff = 0.5 * (math.Cos(math.Pi*ratio) + 1)
	case DecayWSD:
		coeff = wsdCoeff(c, step)
	}
	return c.MinLR + coeff*(c.MaxLR-c.MinLR)
}

func wsdCoeff(c ScheduleConfig, step int) float64 {
	annealStart := c.DecaySteps - c.WSDDecaySteps
	if step <= annealStart {
		return 1
	}
	r := float64(step-annealStart) / float64(c.WSDDecaySteps)
	switch c.WSDDecay {
	case WSDLinear:
		return 1 - r
	case WSDCosine:
		return 0.5 * (math.Cos(math.Pi*r) + 1)
	case WSDMinusSqrt:
		return 1 - math.Sqrt(r)
	default:
		return 2*math.Pow(0.5, r) - 1
	}
}

// WDAt returns the weight decay at step, as Megatron's get_wd.
func (s *Schedule) WDAt(step int) float64 {
	c := s.cfg
	if step > c.WDIncrSteps || c.WDIncr == WDConstant {
		return c.EndWD
	}
	r := float64(step) / float64(c.WDIncrSteps)
	coeff := r
	if c.WDIncr == WDCosine {
		coeff = 0.5 * (math.Cos(math.Pi*(1-r)) + 1)
	}
	return c.StartWD + coeff*(c.EndWD-c.StartWD)
}

// values returns the configuration values saved with the step count; Load refuses a
// state saved with different ones, as Megatron does without --override-opt_param-scheduler.
func (c ScheduleConfig) values() map[string]float64 {
	return map[string]float64{
		"opt_param_scheduler.max_lr":          c.MaxLR,
		"opt_param_scheduler.min_lr":          c.MinLR,
		"opt_param_scheduler.lr_warmup_steps": float64(c.WarmupSteps),
		"opt_param_scheduler.lr_decay_steps":  float64(c.DecaySteps),
		"opt_param_scheduler.lr_decay_style":  float64(c.Decay),
		"opt_param_scheduler.start_wd":        c.StartWD,
		"opt_param_scheduler.end_wd":          c.EndWD,
		"opt_param_scheduler.wd_incr_steps":   float64(c.WDIncrSteps),
		"opt_param_scheduler.wd_incr_style":   float64(c.WDIncr),
	}
}

// StateDict returns the step count and the configuration, as scalars.
func (s *Schedule) StateDict() *State {
	m := s.cfg.values()
	m["opt_param_scheduler.num_steps"] = float64(s.steps)
	return &State{Scalars: m}
}

// Load restores the step count. It returns an error if a saved configuration value
// differs from this schedule's.
func (s *Schedule) Load(st *State) error {
	v, err := st.scalars("opt_param_scheduler.num_steps")
	if err != nil {
		return err
	}
	for k, want := range s.cfg.values() {
		if got, ok := st.Scalars[k]; ok && got != want {
			return fmt.Errorf("optim: loading schedule: saved %s %v differs from the configured %v", k, got, want)
		}
	}
	s.steps = int(v[0])
	return nil
}
