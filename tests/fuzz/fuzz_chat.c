/*
 * Chat template rendering (engine/chat.c, every format) of hostile conversations: the input is a
 * JSON object as in tests/fixtures/chat/golden-*.jsonl ({"messages", "tools",
 * "add_generation_prompt", "enable_thinking"}), turned into a conversation by the front door
 * (engine/frontend.c fe_conv_from_json, as the client wrote it and as vLLM's server flattens it)
 * and rendered in each format, with a generation prompt, without, and continuing the final
 * message. Property: a rendering is either refused with a message or a NUL-terminated prompt of
 * the length returned.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "frontend.h"
#include "fuzz_util.h"
#include "json.h"

static const chat_format_t FORMATS[] = {CHAT_QWEN3, CHAT_QWEN3_INSTRUCT_2507,
                                        CHAT_QWEN3_THINKING_2507, CHAT_QWEN3_5,
                                        CHAT_QWEN3_5_THINK_OFF};

static void render_all(const fe_conv_t *conv, chat_think_t think) {
    const chat_opts_t variants[] = {
        {.add_generation_prompt = true, .enable_thinking = think},
        {.add_generation_prompt = false, .enable_thinking = think},
        {.continue_final_message = true, .enable_thinking = think},
    };
    for (size_t f = 0; f < sizeof FORMATS / sizeof FORMATS[0]; f++) {
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            char *out = NULL;
            size_t len = 0;
            err_t err = {{0}};
            if (chat_render(FORMATS[f], conv->msgs, conv->n_msgs, conv->tools, &variants[v], &out,
                            &len, &err) == 0) {
                FZ_CHECK(out && out[len] == '\0', "%s: prompt not NUL-terminated",
                         chat_format_name(FORMATS[f]));
                free(out);
            } else {
                FZ_CHECK(err.msg[0] != '\0', "%s: refused without a message",
                         chat_format_name(FORMATS[f]));
            }
            (void)chat_prompt_ends_reasoning(FORMATS[f], &variants[v]);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    err_t err;
    cJSON *j = json_parse((const char *)data, size, &err);
    if (!j) return 0;
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(j, "enable_thinking");
    chat_think_t t = cJSON_IsTrue(think)    ? CHAT_THINK_ON
                     : cJSON_IsFalse(think) ? CHAT_THINK_OFF
                                            : CHAT_THINK_DEFAULT;
    const unsigned flags[] = {0, FE_JSON_VLLM};
    for (size_t i = 0; i < 2; i++) {
        fe_conv_t *conv = NULL;
        if (fe_conv_from_json(messages, tools, flags[i], &conv, &err) == 0) {
            render_all(conv, t);
            fe_conv_free(conv);
        }
    }
    cJSON_Delete(j);
    return 0;
}
