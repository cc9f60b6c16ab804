// Package telemetry gives Switchyard Prometheus metrics and OpenTelemetry
// traces, the same on every broker, through the runtime's public hooks
// (ServerConfig.Observer, ServerConfig.Middleware,
// ClientConfig.BeforePublish, Broker.Stats and Broker.Lanes).
//
// # Wiring
//
//	tel, err := telemetry.New(&telemetry.Config{Namespace: "prod", Broker: b, Lanes: myLanes})
//	ccfg := &switchyard.ClientConfig{}
//	tel.InstrumentClient(ccfg) // enqueue spans, trace context in headers
//	scfg := &switchyard.ServerConfig{Lanes: myLanes}
//	tel.Instrument(scfg) // Observer + Middleware
//	http.Handle("/metrics", tel.Handler())
//
// Instrument and InstrumentClient only set the hooks; Observer, Middleware
// and BeforePublish return them for programs that compose hooks
// themselves. One Telemetry serves one namespace; several can share a
// prometheus.Registry (Config.Registry), told apart by the
// switchyard_namespace label.
//
// # Metrics
//
// Every series carries switchyard_namespace. Lane gauges (label lane) are
// read from the broker on each scrape, not polled in the background: a
// scrape asks Broker.Lanes and then Broker.Stats for every lane in parallel,
// all bounded by Config.StatsTimeout, so values are never staler than the
// scrape and an idle process makes no broker calls. A lane whose call fails
// is left out of that scrape, switchyard_broker_up is 0 and
// switchyard_broker_errors_total{op} grows. With many worker replicas, set
// Broker on one of them (or on a small exporter process) so the broker is
// not asked once per replica per scrape; the alert rules aggregate with max
// either way.
//
//	switchyard_lane_ready                      tasks deliverable now
//	switchyard_lane_in_flight                  tasks leased to a worker
//	switchyard_lane_delayed                    tasks ready later (run-at, backoff)
//	switchyard_lane_dead_lettered              tasks in the dead-letter queue
//	switchyard_lane_oldest_ready_age_seconds   age of the oldest ready task (absent
//	                                           when the broker cannot tell, see
//	                                           broker.Capabilities.OldestReadyAge)
//	switchyard_lane_wait_objective_seconds     the lane's objective (for alerts)
//	switchyard_broker_up, switchyard_broker_stats_duration_seconds,
//	switchyard_broker_errors_total{op}
//
// Counters from Observer events, labels lane and kind:
//
//	switchyard_tasks_started_total             attempts started
//	switchyard_tasks_processed_total           deliveries settled with an outcome
//	                                           (succeeded, retried, snoozed, cancelled,
//	                                           awaiting review, dead-lettered)
//	switchyard_tasks_succeeded_total, _retried_total, _snoozed_total,
//	switchyard_tasks_cancelled_total, _awaiting_review_total
//	switchyard_tasks_dead_lettered_total       plus label reason (broker.Reason)
//	switchyard_tasks_duplicate_deliveries_total, switchyard_tasks_returned_total
//	switchyard_lease_extension_failures_total, switchyard_leases_lost_total
//
// From the middleware: switchyard_handler_duration_seconds (histogram, labels
// lane, kind, outcome = ok | error | panic) and switchyard_handlers_running.
// The middleware sees only what the handler returned, so "error" includes
// the non-failures Snooze, Cancel and AwaitApproval (and limits.Result's
// snoozes); the Observer counters above tell those apart.
//
// From limits.BreakerConfig.OnStateChange (set it to BreakerStateChange):
// switchyard_breaker_state{dependency, state} (1 for the current state) and
// switchyard_breaker_transitions_total{dependency, state}.
//
// Labels carry only the namespace, lane, kind and dependency names,
// dead-letter reasons, outcomes, states and op names: never arguments, task
// IDs or credentials.
// Lane and kind values past Config.MaxLabelValues distinct ones are counted
// under "_other", so garbage kinds cannot blow up the series count.
//
// docs/alerts.yml holds the two alerts every deployment needs, written
// against these names: oldest ready task older than its lane's objective,
// and a dead-letter queue that is not empty.
//
// # Traces
//
// BeforePublish starts and ends a producer span "enqueue <kind>" (a child of
// the span in the Enqueue context, if any) and injects its context into the
// message headers with Config.Propagator (W3C traceparent/tracestate by
// default). It assigns the message ID when it has none, so the span names
// the task. The middleware extracts that context and starts a consumer span
// "handle <kind>" per attempt as its child, so every attempt of a task —
// retries, lease-expiry redeliveries and replays from the dead-letter queue,
// which keep the headers — is in the enqueue's trace. Spans carry the kind,
// lane, task ID, tenant and attempt, plus OpenTelemetry messaging
// attributes; never arguments, results or header values. A failed attempt's
// span has status Error and error.type; its message only with
// Config.RecordErrorText, because handler errors can quote arguments.
//
// Step and Effect are switchyard.Step and switchyard.Effect in a child span
// ("step <name>", "effect <key>") with switchyard.replayed telling whether
// the stored output was used instead of calling the function. Spans for
// receive are not made: the scheduler has no hook around Receive, and a
// delivery's wait in the prefetch buffer would need one.
//
// The enqueue span has no duration worth reading and never records a
// publish error, because ClientConfig offers a hook before the publish but
// none after it.
//
// # Errors
//
// New returns an error matching broker.ErrInvalid for a bad Config (a lane
// name that fails broker.ValidateName, a negative timeout or objective,
// buckets not increasing), and the registry's error when a collector for the
// same namespace is already registered there. The hooks never fail a task:
// telemetry problems only show up as missing series or spans.
//
// # Testing
//
//	go test -race ./telemetry/
//
// The tests run a real switchyard.Server on mem:// (the embedded adapter),
// drive known traffic, scrape /metrics over httptest and assert exact
// counter and gauge values; and record spans with the SDK's in-memory
// exporter to check that one task's enqueue and three attempts form one
// trace.
package telemetry
