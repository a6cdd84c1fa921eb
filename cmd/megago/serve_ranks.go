package main

import (
	"megago/nn"
	"megago/parallel"
)

// localTP builds tp goroutine-rank models for serve.NewEngine: build runs on each rank of
// a parallel.RunLocal group with its TP comm, and the ranks stay alive (their group open
// for the engine's collectives) until release is called, after the engine's Close. It
// returns the ranks' errors.
//
// It has the signature of serve.LocalTP, which the engine's branch adds: when both are in
// one tree, this file goes and serve_model.go calls serve.LocalTP.
func localTP(tp int, build func(c parallel.Comm) (*nn.GPT, error)) (models []*nn.GPT, release func() error, err error) {
	models = make([]*nn.GPT, tp)
	stop := make(chan struct{})
	built := make(chan error, tp)
	ended := make(chan error, 1)
	go func() {
		ended <- parallel.RunLocal(tp, func(c parallel.Comm) error {
			m, err := build(c)
			models[c.Rank()] = m
			built <- err
			if err != nil {
				return err
			}
			<-stop
			return nil
		})
	}()
	for range tp {
		if err = <-built; err != nil {
			close(stop)
			<-ended
			return nil, nil, err
		}
	}
	done := false
	release = func() error {
		if done {
			return nil
		}
		done = true
		close(stop)
		return <-ended
	}
	return models, release, nil
}
