#include "client/eval_plot.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace manyshot::client {
namespace {

// Plot area inside the image.
constexpr double kLeft = 80, kRight = 190, kTop = 50, kBottom = 70;

struct Color {
  double r, g, b;
};

Color ModeColor(v1::Mode mode) {
  switch (mode) {
    case v1::MODE_CONVENTIONAL:
      return {0.84, 0.37, 0.0};
    case v1::MODE_PARALLEL:
      return {0.0, 0.62, 0.45};
    default:
      return {0.0, 0.45, 0.70};
  }
}

void Text(cairo_t* cr, double x, double y, const std::string& text, double size, double align_x = 0,
          bool bold = false) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t extents;
  cairo_text_extents(cr, text.c_str(), &extents);
  cairo_move_to(cr, x - align_x * extents.width, y);
  cairo_show_text(cr, text.c_str());
}

}  // namespace

absl::Status WriteEvalPlot(const EvalReport& report, const std::string& path) {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, kEvalPlotWidth, kEvalPlotHeight),
      cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> context(cairo_create(surface.get()),
                                                             cairo_destroy);
  cairo_t* cr = context.get();
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);

  const double width = kEvalPlotWidth - kLeft - kRight;
  const double height = kEvalPlotHeight - kTop - kBottom;
  // x: log10 of shots, padded by a quarter decade on both sides.
  int64_t min_shots = 1, max_shots = 1;
  if (!report.shots.empty()) {
    min_shots = *std::min_element(report.shots.begin(), report.shots.end());
    max_shots = *std::max_element(report.shots.begin(), report.shots.end());
  }
  const double x0 = std::log10(static_cast<double>(min_shots)) - 0.25;
  const double x1 = std::log10(static_cast<double>(max_shots)) + 0.25;
  // y: the data's range with its error bars, on a 0.1 grid inside [0, 1].
  double lo = 1, hi = 0;
  for (const EvalCell& cell : report.cells) {
    lo = std::min(lo, cell.mean - cell.std);
    hi = std::max(hi, cell.mean + cell.std);
  }
  double y0 = std::max(0.0, std::floor(lo * 10 - 1e-9) / 10);
  double y1 = std::min(1.0, std::ceil(hi * 10 + 1e-9) / 10);
  if (report.cells.empty() || y1 - y0 < 0.2) {
    const double middle = report.cells.empty() ? 0.5 : (lo + hi) / 2;
    y0 = std::max(0.0, std::floor(middle * 10) / 10 - 0.1);
    y1 = std::min(1.0, y0 + 0.3);
    y0 = std::max(0.0, y1 - 0.3);
  }
  auto px = [&](double shots) { return kLeft + (std::log10(shots) - x0) / (x1 - x0) * width; };
  auto py = [&](double value) { return kTop + (y1 - value) / (y1 - y0) * height; };

  // Grid, ticks and tick labels.
  cairo_set_line_width(cr, 1);
  for (int tenth = static_cast<int>(std::lround(y0 * 10)); tenth <= std::lround(y1 * 10); ++tenth) {
    const double y = py(tenth / 10.0);
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, kLeft, y);
    cairo_line_to(cr, kLeft + width, y);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    Text(cr, kLeft - 8, y + 4, absl::StrFormat("%.1f", tenth / 10.0), 12, 1);
  }
  for (int64_t shots : report.shots) {
    const double x = px(static_cast<double>(shots));
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, x, kTop);
    cairo_line_to(cr, x, kTop + height);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    Text(cr, x, kTop + height + 18, absl::StrCat(shots), 12, 0.5);
  }
  cairo_set_source_rgb(cr, 0, 0, 0);
  cairo_rectangle(cr, kLeft, kTop, width, height);
  cairo_stroke(cr);

  // Axis labels and title.
  Text(cr, kLeft + width / 2, kEvalPlotHeight - 22, "demonstrations (shots, log scale)", 14, 0.5);
  cairo_save(cr);
  cairo_translate(cr, 24, kTop + height / 2);
  cairo_rotate(cr, -M_PI / 2);
  Text(cr, 0, 0,
       report.generation ? "exact match (mean ± std over samples)"
                         : "accuracy (mean ± std over samples)",
       14, 0.5);
  cairo_restore(cr);
  Text(cr, kLeft + width / 2, 30,
       absl::StrCat(report.dataset, " on ", report.model,
                    report.random_weights ? " (random weights)" : ""),
       15, 0.5, /*bold=*/true);

  // One line per mode, error bars, legend. Modes are drawn a few pixels apart so that error bars
  // at the same shot count stay apart.
  size_t per_mode = report.shots.size();
  for (size_t m = 0; m < report.modes.size(); ++m) {
    const Color color = ModeColor(report.modes[m]);
    const double dodge =
        6 * (static_cast<double>(m) - (static_cast<double>(report.modes.size()) - 1) / 2);
    cairo_set_source_rgb(cr, color.r, color.g, color.b);
    cairo_set_line_width(cr, 2);
    for (size_t k = 0; k < per_mode && m * per_mode + k < report.cells.size(); ++k) {
      const EvalCell& cell = report.cells[m * per_mode + k];
      const double x = px(static_cast<double>(cell.shots)) + dodge;
      if (k == 0) {
        cairo_move_to(cr, x, py(cell.mean));
      } else {
        cairo_line_to(cr, x, py(cell.mean));
      }
    }
    cairo_stroke(cr);
    cairo_set_line_width(cr, 1.5);
    for (size_t k = 0; k < per_mode && m * per_mode + k < report.cells.size(); ++k) {
      const EvalCell& cell = report.cells[m * per_mode + k];
      const double x = px(static_cast<double>(cell.shots)) + dodge;
      const double top = py(std::min(y1, cell.mean + cell.std));
      const double bottom = py(std::max(y0, cell.mean - cell.std));
      cairo_move_to(cr, x, top);
      cairo_line_to(cr, x, bottom);
      cairo_move_to(cr, x - 5, top);
      cairo_line_to(cr, x + 5, top);
      cairo_move_to(cr, x - 5, bottom);
      cairo_line_to(cr, x + 5, bottom);
      cairo_stroke(cr);
      cairo_arc(cr, x, py(cell.mean), 3.5, 0, 2 * M_PI);
      cairo_fill(cr);
    }
    const double legend_y = kTop + 20 + 24 * static_cast<double>(m);
    cairo_set_line_width(cr, 2);
    cairo_move_to(cr, kLeft + width + 16, legend_y - 4);
    cairo_line_to(cr, kLeft + width + 46, legend_y - 4);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    Text(cr, kLeft + width + 54, legend_y, ModeName(report.modes[m]), 13);
  }

  cairo_surface_flush(surface.get());
  cairo_status_t status = cairo_surface_write_to_png(surface.get(), path.c_str());
  if (status != CAIRO_STATUS_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("--plot=", path, ": cannot write the PNG (",
                                                   cairo_status_to_string(status), ")"));
  }
  return absl::OkStatus();
}

}  // namespace manyshot::client
