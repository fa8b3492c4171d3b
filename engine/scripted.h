/*
 * scripted: replies written in advance, for testing what sits on top of the engine (tool-call
 * parsing, agents) with a model that cannot be steered. When the environment variable
 * TACHYON_SCRIPTED_OUTPUTS names a JSON file, a request whose prompt text contains a rule's
 * "when" gets that rule's "reply" as its output, token by token, then the model's EOS; the model
 * still runs, its choices are overridden on the host. Nothing else changes.
 *
 *     [{"when": "weather in Paris", "reply": "<tool_call>\n{...}\n</tool_call>"}, ...]
 *
 * Off (no variable): scripted_load gives NULL and costs nothing.
 *
 * TACHYON_TEST_STEP_DELAY_MS paces the engine for tests that need requests in flight for
 * seconds (the console's drain on quit): the engine thread sleeps that long after each step
 * that leaves work, so such a request costs little CPU however slow the build (sanitizers).
 */
#ifndef TACHYON_SCRIPTED_H
#define TACHYON_SCRIPTED_H

#include <stdint.h>

#include "err.h"
#include "tokenizer.h"

typedef struct scripted scripted_t;

/* The rules of $TACHYON_SCRIPTED_OUTPUTS, or NULL when it is unset (or the model has no
 * tokenizer). -1 with a message naming the file when it is set but unreadable or malformed. */
int scripted_load(const tokenizer_t *tok, scripted_t **out, err_t *err);
void scripted_free(scripted_t *s);

/* The reply for a prompt: its token ids (owned by s) and count, or NULL when no rule matches. */
const int32_t *scripted_match(const scripted_t *s, const int32_t *prompt, int n_prompt, int *n);

/* Microseconds of TACHYON_TEST_STEP_DELAY_MS (0 to 10000 ms), 0 when unset or not a number. */
int scripted_step_delay_us(void);

#endif
