/*
 * weft-perf update --plot FILE: the main job's timeline as an SVG, one row
 * a version, its phases as the trainer saw them laid end to end (update.h,
 * update_phase_t): the gradients made, the optimizer step with its FP8
 * writer, the GPU's finish, the publish call, and the wait until every
 * consumer held the version. Plain SVG 1.1 written by hand: a browser
 * opens it, and no plotting library is needed.
 */
#include "update.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define ROW_PX    18
#define LEFT_PX   90
#define PLOT_PX   900
#define TOP_PX    46
#define LEGEND_PX 28

static const struct {
    const char *name, *color;
} phase_style[UPDATE_PHASES] = {
    {"gradients", "#9e9e9e"}, {"step + FP8 writer", "#1f77b4"}, {"GPU finish", "#17becf"},
    {"publish", "#d62728"},   {"until all consumers had it", "#2ca02c"},
};

int update_plot_svg(const char *path, const update_phase_t *phases, uint64_t count, uint64_t timed_from,
                    const char *title)
{
    FILE  *f;
    double longest_ms = 0.0;

    if (count == 0) {
        fprintf(stderr, "weft-perf update: --plot %s: no version was published\n", path);
        return -1;
    }
    for (uint64_t v = 0; v < count; v++) {
        double total = 0.0;
        for (int k = 0; k < UPDATE_PHASES; k++) {
            total += (double)phases[v].ns[k] / 1e6;
        }
        longest_ms = total > longest_ms ? total : longest_ms;
    }
    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "weft-perf update: --plot %s: %s\n", path, strerror(errno));
        return -1;
    }
    const double scale = longest_ms > 0 ? PLOT_PX / longest_ms : 1.0;
    const int    height = TOP_PX + (int)count * ROW_PX + LEGEND_PX + 24;

    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%d\" y=\"20\" font-size=\"14\">",
            LEFT_PX + PLOT_PX + 20, height, LEFT_PX);
    for (const char *c = title; *c != '\0'; c++) { /* the title is ours, but escape it anyway */
        if (*c == '<') {
            fputs("&lt;", f);
        } else if (*c == '&') {
            fputs("&amp;", f);
        } else {
            fputc(*c, f);
        }
    }
    fprintf(f, "</text>\n<text x=\"%d\" y=\"38\" fill=\"#555\">ms from the start of a version's gradients "
               "(0 to %.1f)</text>\n",
            LEFT_PX, longest_ms);
    for (uint64_t v = 0; v < count; v++) {
        const int y = TOP_PX + (int)v * ROW_PX;
        double    at = 0.0;

        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\"%s>v%llu%s</text>\n", LEFT_PX - 6, y + ROW_PX - 5,
                v + 1 < timed_from ? " fill=\"#999\"" : "", (unsigned long long)(v + 1),
                v + 1 < timed_from ? " (warm-up)" : "");
        for (int k = 0; k < UPDATE_PHASES; k++) {
            const double ms = (double)phases[v].ns[k] / 1e6;

            if (ms > 0) {
                fprintf(f,
                        "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>v%llu %s: %.3f "
                        "ms</title></rect>\n",
                        LEFT_PX + at * scale, y + 2, ms * scale > 0.5 ? ms * scale : 0.5, ROW_PX - 4,
                        phase_style[k].color, (unsigned long long)(v + 1), phase_style[k].name, ms);
            }
            at += ms;
        }
    }
    for (int k = 0, x = LEFT_PX; k < UPDATE_PHASES; k++) {
        const int y = TOP_PX + (int)count * ROW_PX + 16;

        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>", x, y, phase_style[k].color);
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", x + 16, y + 11, phase_style[k].name);
        x += 40 + 7 * (int)strlen(phase_style[k].name);
    }
    fputs("</svg>\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "weft-perf update: --plot %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}
