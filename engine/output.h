/*
 * output: output processing on the engine thread (vLLM v1's update_from_output, check_stop and
 * the output processor's stop strings). A sampled token is appended to its choice; the stop
 * conditions are checked in vLLM's order (length, then past min_tokens EOS and stop ids, then
 * stop strings); the text that may still grow into a stop string is held back; finished
 * choices free their blocks, are counted in the stats and end with a FINISH event; choice 0's
 * computed prompt forks choices 1..n-1.
 *
 *     output_fork_choices(e, req);                  // once choice 0's prompt is computed
 *     output_on_token(e, choice, &result, now);     // for each row that got a token
 *     output_end_request(e, req, ENGINE_FINISH_ABORT, NULL);   // a cancel
 *     output_flush(e);                              // end of step: publish, then notify
 *
 * Engine thread only (core_int.h).
 */
#ifndef TACHYON_OUTPUT_H
#define TACHYON_OUTPUT_H

#include "core_int.h"

/* Appends a sampled token to its choice, checks the stop conditions and queues what it
 * produced (a delta, or the FINISH). */
void output_on_token(core_t *e, eng_choice_t *q, const sampler_result_t *r, double now);

/* Ends one choice: frees its blocks, records it and queues its FINISH with the step's token
 * (r, may be NULL) and the text still held back (already cut at a stop string when stop_idx >=
 * 0; otherwise the detokenizer's tail is added). A no-op for a finished choice. */
void output_finish_choice(core_t *e, eng_choice_t *q, engine_finish_reason_t reason,
                          const sampler_result_t *r, int32_t stop_token, int stop_idx,
                          const char *error);

/* Finishes every unfinished choice (cancel, error, close). */
void output_end_request(core_t *e, eng_req_t *req, engine_finish_reason_t reason,
                        const char *error);

/* Starts choices 1..n-1 from choice 0, whose prompt is now computed. */
void output_fork_choices(core_t *e, eng_req_t *req);

/* Publishes the step's events, then notifies their readers (one fence for all streams). */
void output_flush(core_t *e);

/* Hands the step's grouped inter-token latencies to the stats. */
void output_flush_itl(core_t *e);

/* Stop strings. held_back: bytes at the end of text[0..n) to hold back, the longest suffix
 * that is a proper prefix of a stop string (it may still grow into one), moved back to a
 * character boundary. find_stop: the earliest stop string in text[0..n) (the first listed on a
 * tie): its index and offset, or -1. */
size_t output_held_back(const sampling_params_t *sp, const char *text, size_t n);
int output_find_stop(const sampling_params_t *sp, const char *text, size_t n, size_t *at);

#endif
