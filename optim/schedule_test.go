package optim

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkValueSchedule is MEGATRON-FACTS' check-value schedule: init 0.01, max 0.1, min
// 0.001, warmup 100, decay 1000.
func checkValueSchedule(t *testing.T, d DecayStyle) *Schedule {
	t.Helper()
	s, err := NewSchedule(ScheduleConfig{InitLR: 0.01, MaxLR: 0.1, MinLR: 0.001, WarmupSteps: 100, DecaySteps: 1000, Decay: d})
	require.NoError(t, err)
	return s
}

func TestScheduleMegatronCheckValues(t *testing.T) {
	// The facts write Megatron's arithmetic with decimal literals (0.099 for 0.1 − 0.001),
	// which can differ from it in the last bit.
	const ulps = 1e-16
	lin, cos := checkValueSchedule(t, DecayLinear), checkValueSchedule(t, DecayCosine)
	for _, tc := range []struct {
		name string
		s    *Schedule
		step int
		want float64
	}{
		{"warmup", lin, 50, 0.055},
		{"warmup-cosine", cos, 50, 0.055},
		{"linear-500", lin, 500, 0.1 - 0.099*400/900},
		{"cosine-500", cos, 500, 0.001 + 0.099*0.5*(math.Cos(math.Pi*400/900)+1)},
		{"linear-1001", lin, 1001, 0.001},
		{"cosine-1001", cos, 1001, 0.001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, tc.s.LRAt(tc.step), ulps)
		})
	}
}

// goldenScheduleConfig maps a Megatron scheduler configuration from the golden file.
func goldenScheduleConfig(t *testing.T, c map[string]any) ScheduleConfig {
	t.Helper()
	num := func(k string) float64 { return c[k].(float64) }
	decay := map[string]DecayStyle{"linear": DecayLinear, "constant": DecayConstant, "cosine": DecayCosine,
		"inverse-square-root": DecayInverseSqrt, "WSD": DecayWSD}
	wsd := map[string]WSDStyle{"": WSDExponential, "exponential": WSDExponential, "linear": WSDLinear,
		"cosine": WSDCosine, "minus_sqrt": WSDMinusSqrt}
	wd := map[string]WDStyle{"constant": WDConstant, "linear": WDLinear, "cosine": WDCosine}
	cfg := ScheduleConfig{InitLR: num("init_lr"), MaxLR: num("max_lr"), MinLR: num("min_lr"),
		WarmupSteps: int(num("lr_warmup_steps")), DecaySteps: int(num("lr_decay_steps")),
		Decay: decay[c["lr_decay_style"].(string)], WSDDecaySteps: int(num("wsd_decay_steps")),
		WSDDecay: wsd[c["lr_wsd_decay_style"].(string)], StartWD: num("start_wd"), EndWD: num("end_wd"),
		WDIncrSteps: int(num("wd_incr_steps")), WDIncr: wd[c["wd_incr_style"].(string)]}
	return cfg
}

// TestScheduleMatchesMegatron compares every style at a table of steps with Megatron's
// get_lr and get_wd, transcribed in testdata/gen_optim.py.
func TestScheduleMatchesMegatron(t *testing.T) {
	g := loadGolden(t)
	for i, gs := range g.Schedules {
		name := fmt.Sprintf("%d-%s-%s-wd-%s", i, gs.Config["lr_decay_style"], gs.Config["lr_wsd_decay_style"], gs.Config["wd_incr_style"])
		t.Run(name, func(t *testing.T) {
			s, err := NewSchedule(goldenScheduleConfig(t, gs.Config))
			require.NoError(t, err)
			for j, step := range gs.Steps {
				// Same formulas in the same order: equal to the last bit.
				require.Equal(t, gs.LR[j], s.LRAt(step), "lr at step %d", step)
				require.Equal(t, gs.WD[j], s.WDAt(step), "wd at step %d", step)
			}
		})
	}
}

func TestScheduleStepAndState(t *testing.T) {
	s := checkValueSchedule(t, DecayCosine)
	require.Equal(t, 0.01, s.LR())
	s.Step(50)
	require.Equal(t, s.LRAt(50), s.LR())
	st := s.StateDict()

	r := checkValueSchedule(t, DecayCosine)
	require.NoError(t, r.Load(st))
	require.Equal(t, 50, r.Steps())
	require.Equal(t, s.LR(), r.LR())

	other := checkValueSchedule(t, DecayLinear)
	require.ErrorContains(t, other.Load(st), "lr_decay_style")
	require.ErrorContains(t, r.Load(&State{}), "num_steps missing")
}

func TestScheduleValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ScheduleConfig
		want string
	}{
		{"min-above-max", ScheduleConfig{MaxLR: 0.1, MinLR: 0.2, DecaySteps: 10}, "min ≤ max"},
		{"no-decay-steps", ScheduleConfig{MaxLR: 0.1}, "decay steps 0"},
		{"warmup-too-long", ScheduleConfig{MaxLR: 0.1, WarmupSteps: 10, DecaySteps: 10}, "fewer than decay"},
		{"wsd-without-steps", ScheduleConfig{MaxLR: 0.1, DecaySteps: 10, Decay: DecayWSD}, "WSD decay steps"},
		{"constant-wd-differs", ScheduleConfig{MaxLR: 0.1, DecaySteps: 10, StartWD: 0, EndWD: 0.1}, "start 0 = end 0.1"},
		{"wd-incr-without-steps", ScheduleConfig{MaxLR: 0.1, DecaySteps: 10, WDIncr: WDLinear}, "increment steps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSchedule(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := NewSchedule(ScheduleConfig{MaxLR: 0.1, Decay: DecayConstant})
	require.NoError(t, err, "a constant schedule needs no decay steps")
}
