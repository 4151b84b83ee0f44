// A layout that places its items left to right and wraps to a new row when the width runs out:
// for rows of controls (a plot panel's x axis, log y, smoothing, ...) that must not make a page
// wider than its tab. Modelled on Qt's Flow Layout example
// (https://doc.qt.io/qt-6/qtwidgets-layouts-flowlayout-example.html).
#pragma once

#include <QLayout>
#include <QList>

class QWidget;

namespace tb::ui {

class FlowLayout : public QLayout {
 public:
  /// The gap between items, across and down: `spacing`, or when < 0 the parent layout's
  /// spacing (or the parent widget's style's; 6 px where there is none).
  explicit FlowLayout(QWidget* parent = nullptr, int spacing = -1);
  ~FlowLayout() override;

  void addItem(QLayoutItem* item) override;
  int count() const override;
  QLayoutItem* itemAt(int index) const override;
  QLayoutItem* takeAt(int index) override;

  Qt::Orientations expandingDirections() const override;
  bool hasHeightForWidth() const override;
  int heightForWidth(int width) const override;
  /// The widest item: the layout is never the reason its page scrolls sideways.
  QSize minimumSize() const override;
  /// All items on one row.
  QSize sizeHint() const override;
  void setGeometry(const QRect& rect) override;

  /// The rows the items took at the last setGeometry (1 when they fit side by side).
  int rows() const { return m_rows; }

 private:
  int gap() const;
  // Lays the items out in `rect` (only measures when `apply` is false); returns the height used.
  int arrange(const QRect& rect, bool apply, int* rows = nullptr) const;

  QList<QLayoutItem*> m_items;
  int m_rows = 1;
};

/// A label and its field as one widget, so a FlowLayout keeps them on the same row.
QWidget* labelled(const QString& label, QWidget* field, QWidget* parent);

}  // namespace tb::ui
