#include "client/eval/plot.h"

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
constexpr double kWidth = kEvalPlotWidth - kLeft - kRight;
constexpr double kHeight = kEvalPlotHeight - kTop - kBottom;

struct Color {
  double r, g, b;
};

constexpr Color kMarkGrey = {0.45, 0.45, 0.45};

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

void SetColor(cairo_t* cr, Color c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

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

void Line(cairo_t* cr, double x0, double y0, double x1, double y1) {
  cairo_move_to(cr, x0, y0);
  cairo_line_to(cr, x1, y1);
  cairo_stroke(cr);
}

// Data to pixels: log10 of shots on x (padded by a quarter decade), the values with their error
// bars and marks on y, on a 0.1 grid inside [0, 1].
struct Axes {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  double X(double shots) const { return kLeft + (std::log10(shots) - x0) / (x1 - x0) * kWidth; }
  double Y(double value) const { return kTop + (y1 - value) / (y1 - y0) * kHeight; }
};

Axes AxesFor(const EvalReport& report, const EvalPlotMarks& marks) {
  Axes a;
  int64_t min_shots = 1, max_shots = 1;
  if (!report.shots.empty()) {
    min_shots = *std::min_element(report.shots.begin(), report.shots.end());
    max_shots = *std::max_element(report.shots.begin(), report.shots.end());
  }
  a.x0 = std::log10(static_cast<double>(min_shots)) - 0.25;
  a.x1 = std::log10(static_cast<double>(max_shots)) + 0.25;
  double lo = 1, hi = 0;
  for (const EvalCell& cell : report.cells) {
    lo = std::min(lo, cell.mean - cell.std);
    hi = std::max(hi, cell.mean + cell.std);
  }
  if (marks.majority) {
    lo = std::min(lo, *marks.majority);
    hi = std::max(hi, *marks.majority);
  }
  a.y0 = std::max(0.0, std::floor(lo * 10 - 1e-9) / 10);
  a.y1 = std::min(1.0, std::ceil(hi * 10 + 1e-9) / 10);
  if (lo > hi || a.y1 - a.y0 < 0.2) {
    const double middle = lo > hi ? 0.5 : (lo + hi) / 2;
    a.y0 = std::max(0.0, std::floor(middle * 10) / 10 - 0.1);
    a.y1 = std::min(1.0, a.y0 + 0.3);
    a.y0 = std::max(0.0, a.y1 - 0.3);
  }
  return a;
}

void DrawFrame(cairo_t* cr, const EvalReport& report, const Axes& a) {
  cairo_set_line_width(cr, 1);
  for (int tenth = static_cast<int>(std::lround(a.y0 * 10)); tenth <= std::lround(a.y1 * 10);
       ++tenth) {
    const double y = a.Y(tenth / 10.0);
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    Line(cr, kLeft, y, kLeft + kWidth, y);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    Text(cr, kLeft - 8, y + 4, absl::StrFormat("%.1f", tenth / 10.0), 12, 1);
  }
  for (int64_t shots : report.shots) {
    const double x = a.X(static_cast<double>(shots));
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    Line(cr, x, kTop, x, kTop + kHeight);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    Text(cr, x, kTop + kHeight + 18, absl::StrCat(shots), 12, 0.5);
  }
  cairo_set_source_rgb(cr, 0, 0, 0);
  cairo_rectangle(cr, kLeft, kTop, kWidth, kHeight);
  cairo_stroke(cr);
  Text(cr, kLeft + kWidth / 2, kEvalPlotHeight - 22, "demonstrations (shots, log scale)", 14, 0.5);
  cairo_save(cr);
  cairo_translate(cr, 24, kTop + kHeight / 2);
  cairo_rotate(cr, -M_PI / 2);
  Text(cr, 0, 0,
       report.generation ? "exact match (mean ± std over samples)"
                         : "accuracy (mean ± std over samples)",
       14, 0.5);
  cairo_restore(cr);
  Text(cr, kLeft + kWidth / 2, 30,
       absl::StrCat(report.dataset, " on ", report.model,
                    report.random_weights ? " (random weights)" : ""),
       15, 0.5, /*bold=*/true);
}

// The legend's row `row`: a line sample (dashed when asked) and its name.
void LegendEntry(cairo_t* cr, size_t row, Color color, bool dashed, const std::string& name) {
  const double y = kTop + 20 + 24 * static_cast<double>(row);
  SetColor(cr, color);
  cairo_set_line_width(cr, 2);
  const double dash[] = {6, 4};
  cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
  Line(cr, kLeft + kWidth + 16, y - 4, kLeft + kWidth + 46, y - 4);
  cairo_set_dash(cr, nullptr, 0, 0);
  cairo_set_source_rgb(cr, 0, 0, 0);
  Text(cr, kLeft + kWidth + 54, y, name, 13);
}

// One mode's line through its means, with error bars. `dodge` shifts it a few pixels so that
// error bars of several modes at one shot count stay apart.
void DrawMode(cairo_t* cr, const std::vector<const EvalCell*>& cells, const Axes& a, Color color,
              double dodge) {
  SetColor(cr, color);
  cairo_set_line_width(cr, 2);
  for (size_t k = 0; k < cells.size(); ++k) {
    const double x = a.X(static_cast<double>(cells[k]->shots)) + dodge;
    if (k == 0) {
      cairo_move_to(cr, x, a.Y(cells[k]->mean));
    } else {
      cairo_line_to(cr, x, a.Y(cells[k]->mean));
    }
  }
  cairo_stroke(cr);
  cairo_set_line_width(cr, 1.5);
  for (const EvalCell* cell : cells) {
    const double x = a.X(static_cast<double>(cell->shots)) + dodge;
    const double top = a.Y(std::min(a.y1, cell->mean + cell->std));
    const double bottom = a.Y(std::max(a.y0, cell->mean - cell->std));
    Line(cr, x, top, x, bottom);
    Line(cr, x - 5, top, x + 5, top);
    Line(cr, x - 5, bottom, x + 5, bottom);
    cairo_arc(cr, x, a.Y(cell->mean), 3.5, 0, 2 * M_PI);
    cairo_fill(cr);
  }
}

// The dashed majority-class line (with its legend entry at `legend_row`) and the window-full
// mark.
void DrawMarks(cairo_t* cr, const EvalPlotMarks& marks, const Axes& a, size_t legend_row) {
  const double dash[] = {6, 4};
  if (marks.majority) {
    SetColor(cr, kMarkGrey);
    cairo_set_line_width(cr, 1.5);
    cairo_set_dash(cr, dash, 2, 0);
    Line(cr, kLeft, a.Y(*marks.majority), kLeft + kWidth, a.Y(*marks.majority));
    cairo_set_dash(cr, nullptr, 0, 0);
    LegendEntry(cr, legend_row, kMarkGrey, true, "majority class");
  }
  if (marks.window_full_shots) {
    const Color color = ModeColor(v1::MODE_CONVENTIONAL);
    const double x = a.X(static_cast<double>(*marks.window_full_shots));
    SetColor(cr, color);
    cairo_set_line_width(cr, 1);
    cairo_set_dash(cr, dash, 2, 0);
    Line(cr, x, kTop, x, kTop + kHeight);
    cairo_set_dash(cr, nullptr, 0, 0);
    Text(cr, x + 4, kTop + 14, "conventional: window full", 11);
  }
}

}  // namespace

EvalPlotMarks PlotMarksOf(const EvalReport& report) {
  EvalPlotMarks marks;
  if (!report.generation && report.majority_rate > 0) marks.majority = report.majority_rate;
  for (const EvalCell& cell : report.cells) {
    if (cell.mode != v1::MODE_CONVENTIONAL) continue;
    const bool full = std::any_of(cell.used.begin(), cell.used.end(),
                                  [&cell](int64_t used) { return used < cell.shots; });
    if (full && (!marks.window_full_shots || cell.shots < *marks.window_full_shots)) {
      marks.window_full_shots = cell.shots;
    }
  }
  return marks;
}

absl::Status WriteEvalPlot(const EvalReport& report, const std::string& path) {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, kEvalPlotWidth, kEvalPlotHeight),
      cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> context(cairo_create(surface.get()),
                                                             cairo_destroy);
  cairo_t* cr = context.get();
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);

  const EvalPlotMarks marks = PlotMarksOf(report);
  const Axes axes = AxesFor(report, marks);
  DrawFrame(cr, report, axes);
  const size_t modes = report.modes.size();
  for (size_t m = 0; m < modes; ++m) {
    std::vector<const EvalCell*> cells;
    for (const EvalCell& cell : report.cells) {
      if (cell.mode == report.modes[m]) cells.push_back(&cell);
    }
    const double dodge = 6 * (static_cast<double>(m) - (static_cast<double>(modes) - 1) / 2);
    DrawMode(cr, cells, axes, ModeColor(report.modes[m]), dodge);
    LegendEntry(cr, m, ModeColor(report.modes[m]), false, ModeName(report.modes[m]));
  }
  DrawMarks(cr, marks, axes, modes);

  cairo_surface_flush(surface.get());
  cairo_status_t status = cairo_surface_write_to_png(surface.get(), path.c_str());
  if (status != CAIRO_STATUS_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("--plot=", path, ": cannot write the PNG (",
                                                   cairo_status_to_string(status), ")"));
  }
  return absl::OkStatus();
}

}  // namespace manyshot::client
