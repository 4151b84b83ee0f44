// A scroll area that scrolls up and down only: as wide as its widget's least width (plus the
// scroll bar), so that a page in a tab or dock is never cut at the right, while its height may
// be anything.
#pragma once

#include <QScrollArea>

namespace tb::ui {

class VerticalScrollArea : public QScrollArea {
 public:
  explicit VerticalScrollArea(QWidget* parent = nullptr);
  QSize minimumSizeHint() const override;

 protected:
  /// The page's least width changed (its layout asked for a new one): so does this area's.
  bool eventFilter(QObject* watched, QEvent* event) override;
};

}  // namespace tb::ui
