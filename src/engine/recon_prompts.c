/* Tokenizing a reconstruction press's instructions (recon_prompts.h). */
#include "engine/recon_prompts.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "press/press.h"

static int add_text(const pkv_model *m, int32_t **ids, int *n, const char *text, bool parse_special,
                    pkv_error *err) {
    int cap = 0;
    *ids = NULL;
    *n = 0;
    if (!*text) return 0;
    return pkv_tokenize_append(m, text, strlen(text), false, parse_special, ids, n, &cap, err) < 0 ? -1 : 0;
}

/* The generation prompt after a user turn, as kvpress finds it: the template
 * rendered around "dummy context" and a separator, split at the separator. */
static int chat_suffix(const pkv_model *m, pkv_recon_prompts *p, pkv_error *err) {
    const char *sep = "\n#############"; /* "\n" + "#" * len("dummy context") */
    pkv_chat_message msg = {"user", "dummy context\n#############"};
    char buf[4096];
    int len = pkv_chat_format(m, &msg, 1, buf, sizeof buf, NULL, err);
    if (len < 0) return -1;
    if (len >= (int)sizeof buf) return pkv_fail(err, PKV_ERR_LIMIT, "kvzip: the chat template's rendering is too long");
    const char *at = strstr(buf, sep);
    if (!at) return pkv_fail(err, PKV_ERR_UNSUPPORTED, "kvzip: the chat template does not keep the user's text");
    return add_text(m, &p->suffix, &p->n_suffix, at + strlen(sep), true, err);
}

int pkv_recon_prompts_build(const pkv_model *model, const pkv_press_cfg *press, bool chat, pkv_recon_prompts *out,
                            pkv_error *err) {
    memset(out, 0, sizeof *out);
    const pkv_press_recon_ops *ro = press && press->ops ? press->ops->recon : NULL;
    if (!ro) return pkv_fail(err, PKV_ERR_INTERNAL, "reconstruction prompts asked of a press that does not reconstruct");
    int rc = add_text(model, &out->first, &out->n_first, ro->first_prompt, false, err);
    if (rc == 0) rc = add_text(model, &out->next, &out->n_next, ro->next_prompt, false, err);
    if (rc == 0) rc = chat ? chat_suffix(model, out, err) : add_text(model, &out->suffix, &out->n_suffix, "\n", false, err);
    if (rc) pkv_recon_prompts_free(out);
    return rc;
}

void pkv_recon_prompts_free(pkv_recon_prompts *p) {
    free(p->first);
    free(p->next);
    free(p->suffix);
    memset(p, 0, sizeof *p);
}
